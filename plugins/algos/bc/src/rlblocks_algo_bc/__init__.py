"""Behaviour cloning for rlblocks: the dataset's actions learned by supervised learning
(``training="offline"``)."""
