"""Checks shared by the states gradcomp saves (CompressionState's and DiLoCo's)."""
from typing import Any, Dict


def check_saved_rank(who: str, state: Dict[str, Any], rank: int, world: int) -> None:
    """A state holds one rank's memories: restoring another rank's, or a state of another
    world size, would run silently with the wrong residuals. (States saved before the rank
    was recorded are taken as they are.)"""
    if "rank" not in state:
        return
    saved_rank, saved_world = state.get("rank"), state.get("world_size")
    if (saved_rank, saved_world) != (rank, world):
        raise ValueError(
            f"{who}: the state was saved by rank {saved_rank} of {saved_world}; this is rank "
            f"{rank} of {world}: each rank restores the state it saved (one file per rank)"
        )
