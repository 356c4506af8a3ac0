"""Every error ssbj raises is in the SSBJError tree, and is either transient or terminal."""

import inspect

import ssbj.errors
from ssbj.adapters.kafka_source import KafkaSourceError
from ssbj.errors import SSBJError, TerminalError, TransientError


def _errors() -> list[type[BaseException]]:
    found = [c for _, c in inspect.getmembers(ssbj.errors, inspect.isclass) if issubclass(c, BaseException)]
    return [*found, KafkaSourceError]


def test_every_error_is_transient_xor_terminal() -> None:
    for cls in _errors():
        assert issubclass(cls, SSBJError), cls
        if cls in (SSBJError, TransientError, TerminalError):
            continue
        assert issubclass(cls, TransientError) != issubclass(cls, TerminalError), cls


def test_no_module_defines_an_error_outside_the_tree() -> None:
    import pkgutil

    import ssbj

    outside = []
    for mod in pkgutil.walk_packages(ssbj.__path__, "ssbj."):
        if mod.name.startswith(("ssbj.bench", "ssbj.testing")):
            continue  # tools, not the library
        module = __import__(mod.name, fromlist=["_"])
        for name, cls in inspect.getmembers(module, inspect.isclass):
            mine = cls.__module__ == mod.name and not name.startswith("_")
            if mine and issubclass(cls, Exception) and not issubclass(cls, SSBJError):
                outside.append(f"{mod.name}.{name}")
    assert outside == []
