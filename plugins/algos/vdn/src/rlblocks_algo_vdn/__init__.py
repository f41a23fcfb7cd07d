"""VDN for rlblocks: the team's Q-value as the sum of per-agent utilities (the policy lives in
``rlblocks_algo_qmix``, which builds both)."""
