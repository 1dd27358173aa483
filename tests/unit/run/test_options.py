from __future__ import annotations

from pathlib import Path

import pytest

from convmatrix.errors import BadInput
from convmatrix.run import options


def test_parse_all_options_and_suite_args() -> None:
    opts = options.parse(["--out", "x", "--shard", "2/3", "--resume", "--gpus", "0,1", "--", "-k", "conv2d"])
    assert opts.out == Path("x")
    assert opts.shard == (2, 3)
    assert opts.resume
    assert opts.gpus == "0,1"
    assert opts.suite_args == ("-k", "conv2d")


def test_default_out_is_a_new_run_dir() -> None:
    assert options.parse([]).out.parent == options.RUNS_DIR


@pytest.mark.parametrize("args", [["--shard", "0/2"], ["--shard", "3/2"], ["--shard", "x"],
                                  ["--gpus", "0;rm"], ["--bogus"], ["-k", "x"]])
def test_bad_options_are_bad_input(args: list[str]) -> None:
    with pytest.raises(BadInput, match="run options"):
        options.parse(args)


def test_gpus_names_mig_devices_and_expect_gpu_takes_slice_keys() -> None:
    """Issue 37: 0:1 is MIG device 1 of GPU 0 (the container toolkit's form); a slice's key is a GPU key."""
    opts = options.parse(["--gpus", "0:1,2", "--expect-gpu", "h200-sm90-mig3g-71gb,h100-sm90"])
    assert opts.gpus == "0:1,2" and opts.expect_gpus == ("h200-sm90-mig3g-71gb", "h100-sm90")
    for bad in (["--gpus", "0:"], ["--gpus", ":1"], ["--gpus", "0:1:2"], ["--expect-gpu", "h200-sm90-mig3g.71gb"],
                ["--expect-gpu", "h200"], ["--expect-gpu", "h200-sm90-gpu"]):
        with pytest.raises(BadInput, match="run options"):
            options.parse(bad)


def test_shards_partition_the_cells() -> None:
    ids = [f"c{i}" for i in range(7)]
    shards = [[c for c in ids if options.in_shard(c, ids, (i, 3))] for i in (1, 2, 3)]
    assert sorted(c for shard in shards for c in shard) == sorted(ids)
    assert all(shards)
    assert options.in_shard("c1", ids, None)


def test_the_control_is_in_every_shard_and_the_rest_are_dealt_once() -> None:
    ids = [f"c{i}" for i in range(7)]
    shards = [[c for c in ids if options.in_shard(c, ids, (i, 3), "c3")] for i in (1, 2, 3)]
    assert all("c3" in shard for shard in shards)
    dealt = [c for shard in shards for c in shard if c != "c3"]
    assert sorted(dealt) == sorted(set(ids) - {"c3"}) and len(dealt) == 6  # each other cell once
    assert [len(shard) for shard in shards] == [3, 3, 3]


@pytest.mark.parametrize("host", ["a/b", "..", "-x", "a b", "x" * 64, "a@b", "é"])
def test_a_host_name_that_could_escape_or_split_a_directory_name_is_bad_input(
    host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(BadInput, match="--host"):
        options.parse(["--host", host])
    monkeypatch.setenv("CONVMATRIX_HOST", host)
    with pytest.raises(BadInput, match="CONVMATRIX_HOST"):
        options.parse([])


def test_the_host_is_given_else_the_environments_else_this_machines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVMATRIX_HOST", "node-7")
    assert options.parse(["--host", "gpu01.rack2"]).host == "gpu01.rack2"
    assert options.parse([]).host == "node-7"
    monkeypatch.delenv("CONVMATRIX_HOST")
    monkeypatch.setattr("socket.gethostname", lambda: "Weird Host!.example.com")
    assert options.parse([]).host == "Weird-Host-"
    monkeypatch.setattr("socket.gethostname", lambda: "")
    assert options.parse([]).host == "localhost"


def test_latest_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BadInput, match="no run recorded yet"):
        options.latest()
    options.mark_latest(Path("reports/runs/r1"))
    assert options.latest() == Path("reports/runs/r1")


@pytest.mark.parametrize("args", [["--gpus", "\u0661"], ["--shard", "\u0661/2"]])
def test_non_ascii_digits_are_not_indices(args: list[str]) -> None:
    with pytest.raises(BadInput, match="is not"):
        options.parse(args)


def test_every_gpu_is_a_run_option() -> None:
    assert options.parse(["--every-gpu"]).every_gpu and not options.parse([]).every_gpu


def test_the_engine_option() -> None:
    assert options.parse(["--engine", "podman"]).engine == "podman"
    assert options.parse([]).engine is None
    with pytest.raises(BadInput, match=r"run options: .*--engine.*invalid choice"):
        options.parse(["--engine", "$(reboot)"])


def test_every_run_option_is_in_run_help_with_a_line_of_its_own() -> None:
    """Issue 34 item 5: `convmatrix run --help` did not list --explain (the run options were a
    prose paragraph). It lists every option the run parser reads, each with its help."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "convmatrix", "run", "--help"], capture_output=True, text=True,
                          check=True)
    listed = done.stdout.split("run options", 1)[1].splitlines()
    for action in options.parser()._actions:
        assert action.help, action.option_strings
        flag = action.option_strings[0]
        (line,) = [i for i, text in enumerate(listed) if text.strip().startswith(flag + " ") or text.strip() == flag
                   or text.strip().startswith(flag)]
        said = " ".join(listed[line:line + 2])
        assert action.help.split(" (")[0] in said, (flag, said)
    assert "--explain" in done.stdout


# Issue 32, item 5: the suite options convmatrix sets for each cell (where its files go, whose they
# are) are refused, exact or as an abbreviation argparse would expand, or hidden in an @FILE.
@pytest.mark.parametrize(("suite", "says"), [
    (["--results-dir", "/elsewhere"], "--results-dir is set by convmatrix"),
    (["--results-dir=/elsewhere"], "--results-dir is set by convmatrix"),
    (["--results-d", "/elsewhere"], "--results-d (an abbreviation of --results-dir) is set by convmatrix"),
    (["--res=/elsewhere"], "--res (an abbreviation of --results-dir)"),
    (["--cell-id", "other"], "--cell-id is set by convmatrix"),
    (["-k", "conv", "--ce=other"], "--ce (an abbreviation of --cell-id)"),
    (["@more-args.txt"], "@more-args.txt: pytest would read options from that file"),
])
def test_suite_options_the_harness_sets_are_refused(suite: list[str], says: str) -> None:
    with pytest.raises(BadInput) as raised:
        options.parse(["--out", "x", "--", *suite])
    assert raised.value.exit_code == 2
    assert str(raised.value).count("\n") == 0 and says in str(raised.value), str(raised.value)


def test_pytests_own_options_near_the_owned_ones_pass() -> None:
    """--co (pytest's --collect-only), -r, --rootdir, --reruns: none abbreviates an owned option."""
    opts = options.parse(["--", "--co", "-rA", "--rootdir", "r", "--reruns", "2", "--cases", "f.toml"])
    assert opts.suite_args == ("--co", "-rA", "--rootdir", "r", "--reruns", "2", "--cases", "f.toml")


@pytest.mark.parametrize("given", [["--out", "x"], ["--ou", "x"], ["--o=x"], ["--shard", "1/2"], ["--sha", "1/2"],
                                   ["--sh=1/2"]])
def test_run_options_a_caller_owns_are_refused_as_the_parser_reads_them(given: list[str]) -> None:
    """The engines own --out and --shard: `--ou`, which this parser expands to --out, is --out."""
    options.parse(given)  # convmatrix run owns neither: taken
    with pytest.raises(BadInput, match=r"run options: --(o|ou|out|sh|sha|shard)\b.* is set by the engine"):
        options.parse(given, owned=("--out", "--shard"))


def test_allow_cpu_from_the_option_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(options.ALLOW_CPU, raising=False)
    assert not options.parse([]).allow_cpu
    assert options.parse(["--allow-cpu"]).allow_cpu
    assert not options.allow_cpu(["--", "--allow-cpu"])  # a suite option, not a run option
    monkeypatch.setenv(options.ALLOW_CPU, "1")
    assert options.parse([]).allow_cpu and options.allow_cpu([])
    monkeypatch.setenv(options.ALLOW_CPU, "0")
    assert not options.parse([]).allow_cpu


def test_an_empty_argument_is_never_named_as_the_owned_option() -> None:
    """Review: `--host "" --ou X` named the empty argument ('run options:  (argparse reads it as --out)')."""
    with pytest.raises(BadInput, match=r"run options: --ou \(argparse reads it as --out\)"):
        options.parse(["--host", "", "--ou", "x"], owned=("--out",))


@pytest.mark.parametrize("given", ["-1", "x", "1.5", "\u0663", "11", "99999", "", " 1", "1e1"])
def test_retries_takes_a_whole_number_up_to_its_bound(given: str) -> None:
    """--retries is a new input surface: each attempt is kept whole, so the count is bounded."""
    with pytest.raises(BadInput, match=r"--retries .* is not a whole number from 0 to 10") as raised:
        options.parse(["--retries", given])
    assert raised.value.exit_code == 2 and "\n" not in str(raised.value)
    assert options.parse(["--retries", "10"]).retries == options.MAX_RETRIES
