"""ir/name_supply.fresh_name: the first free name of a scope, recorded in it."""

from scheduler_core.ir.name_supply import fresh_name


def test_free_base_is_returned_and_taken():
    taken: set = set()
    assert fresh_name("x", taken) == "x"
    assert taken == {"x"}


def test_taken_names_get_the_first_free_suffix():
    taken = {"x", "x_1", "x_3"}
    assert fresh_name("x", taken) == "x_2"
    assert fresh_name("x", taken) == "x_4"
    assert taken == {"x", "x_1", "x_2", "x_3", "x_4"}


def test_separator():
    taken = {"red", "red1"}
    assert fresh_name("red", taken, sep="") == "red2"


def test_many_names_are_distinct():
    taken: set = set()
    names = [fresh_name("t", taken) for _ in range(50)]
    assert len(set(names)) == 50 and names[:3] == ["t", "t_1", "t_2"]
