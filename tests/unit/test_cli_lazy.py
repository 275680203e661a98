"""The CLI imports a command's modules when the command is looked up: the table in
raidlab.cli names, for each command module, the top-level commands it registers, and a
command loaded alone must be the command the whole CLI has."""

from __future__ import annotations

import importlib
import subprocess
import sys

import click
import pytest

from raidlab import cli as cli_mod


def _tree(command: click.Command) -> object:
    if isinstance(command, click.Group):
        return {name: _tree(sub) for name, sub in sorted(command.commands.items())}
    return [p.name for p in command.params]


def _eager() -> click.Group:
    group = click.Group("eager")
    for name in cli_mod._COMMAND_MODULES:
        importlib.import_module(name).register(group)
    return group


def test_the_table_names_what_each_module_registers():
    group = click.Group("probe")
    for name, listed in cli_mod._COMMAND_MODULES.items():
        before = {k: (v, len(getattr(v, "commands", ()))) for k, v in group.commands.items()}
        importlib.import_module(name).register(group)
        added = {k for k, v in group.commands.items()
                 if k not in before or before[k] != (v, len(getattr(v, "commands", ())))}
        assert added <= set(listed), (name, added - set(listed))
        assert added, name
    assert sorted(group.commands) == sorted({n for ns in cli_mod._COMMAND_MODULES.values() for n in ns})


@pytest.mark.parametrize("name", sorted(_eager().commands))
def test_a_command_loaded_alone_is_the_whole_cli_s(name):
    eager = _eager().commands[name]
    lazy = cli_mod.LazyGroup("lazy")
    with click.Context(lazy) as ctx:
        command = lazy.get_command(ctx, name)
    assert command is not None and _tree(command) == _tree(eager)
    other = next(n for n in sorted(cli_mod._COMMAND_MODULES["raidlab.cli.export"]) if n != name)
    with click.Context(lazy) as ctx:  # a later lookup in the same process keeps the first
        lazy.get_command(ctx, other)
        assert _tree(lazy.get_command(ctx, name)) == _tree(eager)


def test_help_lists_every_command_and_an_unknown_one_is_refused():
    lazy = cli_mod.LazyGroup("lazy")
    with click.Context(lazy) as ctx:
        assert lazy.list_commands(ctx) == sorted(_eager().commands)
        assert lazy.get_command(ctx, "no-such-command") is None


def test_a_command_imports_only_its_own_modules():
    code = ("import sys; from raidlab.cli import main; main(['status', '--help']);"
            "print(sorted(m for m in sys.modules if m.startswith('raidlab.cli.')));"
            "print('trio' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    modules, trio_loaded = out.strip().splitlines()[-2:]
    loaded = eval(modules)  # a list of module names, printed by the child
    # raidlab.cli.array and the helpers it imports (the architectures' option help), not the rest
    assert "raidlab.cli.array" in loaded and len(loaded) <= 2 and trio_loaded == "False", out
