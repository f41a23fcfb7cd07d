"""GAIL for rlblocks: an on-policy learner trained on a discriminator's reward, learned against
expert transitions (``training="on-policy"``, with a dataset)."""
