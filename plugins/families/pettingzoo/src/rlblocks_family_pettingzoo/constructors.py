"""PettingZoo's constructor names, which mark an ``env.id`` as a multi-agent env. Standard
library only: the spec reads it."""

#: ``"mpe2.simple_spread_v3:parallel_env"`` (parallel API) or
#: ``"pettingzoo.classic.tictactoe_v3:env"`` (AEC API) name a multi-agent env in ``env.id``
CONSTRUCTORS = ("parallel_env", "env")
