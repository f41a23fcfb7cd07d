"""QMIX (and VDN's sum) for rlblocks: value decomposition over the joint view of a cooperative
multi-agent env."""
