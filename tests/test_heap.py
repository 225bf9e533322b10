"""service/repository/heap.py: what is alive once the models load is frozen out of the collector's
walks, and a version let go is still collected (its cycles)."""
import gc
import weakref

from service.repository import heap


class Node:
    pass


def test_what_is_alive_at_load_is_frozen_and_a_released_cycle_is_still_collected():
    version = Node()
    version.reading = Node()
    version.reading.answerer = version  # a cycle, as an answerer and its reading make
    gone = weakref.ref(version)
    try:
        heap.freeze_loaded()
        assert gc.get_freeze_count() > 0
        del version
        gc.collect()
        assert gone() is not None  # frozen: the collector does not walk it, so its cycle stays
        heap.released()
        assert gone() is None
        assert gc.get_freeze_count() > 0  # the rest frozen again
    finally:
        heap.stop()
    assert gc.get_freeze_count() == 0


def test_off_until_the_server_turns_it_on():
    version = Node()
    version.self = version
    gone = weakref.ref(version)
    heap.released()  # not on: nothing frozen, nothing collected here
    assert gc.get_freeze_count() == 0
    del version
    gc.collect()
    assert gone() is None
