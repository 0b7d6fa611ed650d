"""TrainConfig is the policy model and six parts, each setting in exactly one place; the command line names
every setting by its dotted path, `--help` shows the few set most often, grouped by part, and `--help-all`
every option."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from rl.cli import dataclass_from_args
from rl.config import TrainConfig

import train  # scripts/ is on sys.path under pytest (pyproject.toml)

PARTS = ("engine", "search", "algorithm", "learner", "value", "loop")


def leaf_paths(cls, prefix: str = "") -> list[str]:
    """The dotted path of every setting of `cls` (nested dataclasses opened)."""
    hints = typing.get_type_hints(cls)
    paths = []
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            paths += leaf_paths(hints[f.name], f"{prefix}{f.name}.")
        else:
            paths.append(prefix + f.name)
    return paths


def test_every_setting_has_one_place_under_one_part():
    """The top level is the model and the parts; no setting name repeats inside one part's own fields, and
    no part keeps a copy of another's setting (one source of truth: a setting has one dotted path)."""
    assert [f.name for f in dataclasses.fields(TrainConfig)] == ["model", *PARTS]
    paths = leaf_paths(TrainConfig)
    assert len(paths) == len(set(paths))
    own = {part: {f.name for f in dataclasses.fields(typing.get_type_hints(TrainConfig)[part])} for part in PARTS}
    for part in PARTS:
        for other in PARTS:
            if other != part:
                shared = own[part] & own[other] - {"dtype", "threads", "lr"}  # the same word, another thing
                assert not shared, f"{part} and {other} both hold {shared}"


def test_the_config_round_trips_through_a_dict(tmp_path):
    """`dataclasses.asdict` (what a run summary stores) builds the same config back, parts and all."""
    config = TrainConfig(model="m", loop={"output_dir": str(tmp_path), "iterations": 3},
                         learner={"lr": 3e-4}, value={"critic": {"enabled": False}})
    assert TrainConfig(**dataclasses.asdict(config)) == config
    assert config.learner.lr == 3e-4 and config.value.critic.enabled is False and config.loop.iterations == 3


def test_errors_name_the_setting_by_its_dotted_path(tmp_path):
    with pytest.raises(ValueError, match=r"TrainConfig.learner.lr must be a number > 0; got 0"):
        TrainConfig(learner={"lr": 0}, loop={"output_dir": str(tmp_path)})
    with pytest.raises(ValueError, match=r"TrainConfig.loop.iterations must be an integer >= 1; got 0"):
        TrainConfig(loop={"iterations": 0, "output_dir": str(tmp_path)})


def test_the_command_line_names_settings_by_their_parts(tmp_path):
    parser = train.build_parser()
    args = parser.parse_args(["--task", "arithmetic", "--learner.lr", "3e-4", "--loop.iterations", "3",
                              "--search.strategy", "beam", "--search.beam.num_beams", "8",
                              "--value.critic.enabled", "false", "--loop.output_dir", str(tmp_path)])
    config = dataclass_from_args(TrainConfig, args)
    assert (config.learner.lr, config.loop.iterations, config.search.strategy) == (3e-4, 3, "beam")
    assert config.search.chosen.num_beams == 8 and config.value.critic.enabled is False
    with pytest.raises(SystemExit):
        parser.parse_args(["--task", "arithmetic", "--lr", "3e-4"])  # no flat alias beside the nested option


def test_help_is_short_and_grouped_by_part_help_all_lists_every_option(capsys):
    parser = train.build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    short = capsys.readouterr().out
    for part in PARTS:
        if part != "value":  # the short view has no value option
            assert f"\n{part} (" in short, part
    assert "--learner.lr" in short and "--loop.iterations" in short and "--task_path" in short
    assert "--learner.micro_batch_tokens" not in short and "--help-all lists all" in short
    options = [line for line in short.splitlines() if line.startswith("  --")]
    assert len(options) <= 25, options
    with pytest.raises(SystemExit):
        parser.parse_args(["--help-all"])
    full = capsys.readouterr().out
    every = [option for action in parser._actions for option in action.option_strings if option.startswith("--")]
    assert len(every) > 100
    missing = [option for option in every if option not in full]
    assert not missing, missing


@pytest.mark.parametrize("script", ["train_dpo", "train_rs_sft", "scaling", "solve"])
def test_every_script_built_on_the_shared_options_has_a_short_help_and_a_full_one(script, capsys):
    import scaling
    import solve
    from rl.dpo import DPOConfig
    from rl.rs_sft import RSSFTConfig
    from tree_trainer_cli import online_parser

    parser = {"train_dpo": lambda: online_parser("", DPOConfig, "dpo"),
              "train_rs_sft": lambda: online_parser("", RSSFTConfig, "rs"),
              "scaling": scaling.build_parser, "solve": solve.build_parser}[script]()
    for flag in ("--help", "--help-all"):
        with pytest.raises(SystemExit):
            parser.parse_args([flag])
    short, full = capsys.readouterr().out.split("usage:")[1:]
    assert "--task_path" in short and "--split" in short and "--help-all lists all" in short
    assert len([line for line in short.splitlines() if line.startswith("  --")]) <= 20
    assert len(full) > 2 * len(short)
