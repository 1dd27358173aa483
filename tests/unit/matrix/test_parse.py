from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from convmatrix import matrix
from convmatrix.cli.main import main
from convmatrix.errors import BadInput

BASE = """
name = "t"
[axes]
lane = ["baremetal"]
torch = ["2.4.1", "2.5.1"]
cuda = ["cu124", "cu126"]
cudnn = ["bundled"]
python = ["3.11"]
"""


def test_expands_product_and_prunes_with_reason(write_matrix: Callable[[str], Path]) -> None:
    m = matrix.load(write_matrix(BASE))
    assert [c.id for c in m.cells] == [
        "baremetal-torch2.4.1-cu124-cudnnbundled-py3.11",
        "baremetal-torch2.5.1-cu124-cudnnbundled-py3.11",
    ]
    reasons = {(p.values["torch"], p.values["cuda"]): p.reason for p in m.pruned}
    assert set(reasons) == {("2.4.1", "cu126"), ("2.5.1", "cu126")}
    assert "never published for cu126" in reasons[("2.5.1", "cu126")]


def test_misspelt_key_names_key_and_file(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix(BASE.replace("cudnn =", "cudnnn ="))
    with pytest.raises(BadInput) as err:
        matrix.load(path)
    assert str(path) in str(err.value)
    assert "'cudnnn'" in str(err.value)
    assert err.value.exit_code == 2


@pytest.mark.parametrize(
    ("snippet", "where"),
    [
        ('torch = ["2.5"]', "[axes].torch[0]"),
        ('cuda = ["cuda12.4"]', "[axes].cuda[0]"),
        ('cudnn = ["9.5"]', "[axes].cudnn[0]"),
        ('python = ["3.11; rm -rf /"]', "[axes].python[0]"),
    ],
)
def test_malformed_values_name_the_field(write_matrix: Callable[[str], Path], snippet: str, where: str) -> None:
    key = snippet.split(" =")[0]
    text = "\n".join(snippet if line.startswith(f"{key} =") else line for line in BASE.splitlines())
    with pytest.raises(BadInput, match=re.escape(where)):
        matrix.load(write_matrix(text))


def test_impossible_control_is_rejected_with_reason(write_matrix: Callable[[str], Path]) -> None:
    text = BASE + '[control]\nlane = "baremetal"\ntorch = "2.4.1"\ncuda = "cu126"\n'
    with pytest.raises(BadInput, match=r"\[control\]: names an impossible stack: torch 2.4.1 was never published for cu126"):
        matrix.load(write_matrix(text))


def test_impossible_control_outside_axes_is_rejected_with_reason(write_matrix: Callable[[str], Path]) -> None:
    text = BASE + '[control]\nlane = "baremetal"\ntorch = "2.8.0"\ncuda = "cu121"\ncudnn = "bundled"\npython = "3.11"\n'
    with pytest.raises(BadInput, match="never published for cu121"):
        matrix.load(write_matrix(text))


def test_control_must_be_unique(write_matrix: Callable[[str], Path]) -> None:
    with pytest.raises(BadInput, match="matches 2 cells"):
        matrix.load(write_matrix(BASE + '[control]\ncuda = "cu124"\n'))


def test_control_and_host_include(write_matrix: Callable[[str], Path]) -> None:
    m = matrix.load(write_matrix(BASE + '[[include]]\nlane = "host"\n[control]\ntorch = "2.5.1"\ncuda = "cu124"\n'))
    assert m.control is not None and m.control.id == "baremetal-torch2.5.1-cu124-cudnnbundled-py3.11"
    assert m.cells[-1].id == "host"


def test_include_of_impossible_stack_is_rejected(write_matrix: Callable[[str], Path]) -> None:
    text = BASE + '[[include]]\nlane = "baremetal"\ntorch = "2.5.1"\ncuda = "cu124"\ncudnn = "8.9.7.29"\n'
    with pytest.raises(BadInput, match=r"\[\[include\]\] #1: impossible stack .*major 8"):
        matrix.load(write_matrix(text))


def test_exclude_partial_keys(write_matrix: Callable[[str], Path]) -> None:
    m = matrix.load(write_matrix(BASE + '[[exclude]]\ntorch = "2.4.1"\n'))
    assert [c.torch for c in m.cells] == ["2.5.1"]
    assert all(p.values["torch"] != "2.4.1" for p in m.pruned)


def test_container_needs_base_and_base_axis_goes_into_id(write_matrix: Callable[[str], Path]) -> None:
    text = BASE.replace('lane = ["baremetal"]', 'lane = ["container"]')
    with pytest.raises(BadInput, match="need a base image"):
        matrix.load(write_matrix(text))
    m = matrix.load(write_matrix(text + 'base = ["python:3.11-slim-bookworm", "convmatrix/base:bookworm"]\n'))
    assert m.cells[0].id == "container-torch2.4.1-cu124-cudnnbundled-py3.11-python-3.11-slim-bookworm"
    assert len({c.id for c in m.cells}) == len(m.cells) == 4


def test_not_toml_and_missing_file(write_matrix: Callable[[str], Path], tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="not valid TOML"):
        matrix.load(write_matrix("name = \n"))
    with pytest.raises(BadInput, match=r"no such matrix file$"):
        matrix.load(tmp_path / "nope.toml")


def test_the_default_matrix_missing_outside_a_checkout_says_where_matrices_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen (a review): an installed wheel's `convmatrix run` outside a checkout said only
    'matrix/default.toml: no such matrix file', with no word of -m or of the matrices it ships."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BadInput) as raised:
        matrix.load("matrix/default.toml")
    (line,) = raised.value.lines()
    assert line.startswith("matrix/default.toml: no such matrix file (the default, looked for in the current directory")
    examples = Path(line.rsplit(" e.g. one of ", 1)[1].rstrip("/"))
    assert (examples / "fix-proof.toml").is_file() and (examples / "upgrade.toml").is_file()


def test_everything_pruned_is_an_error(write_matrix: Callable[[str], Path]) -> None:
    with pytest.raises(BadInput, match="no cells"):
        matrix.load(write_matrix(BASE.replace('["cu124", "cu126"]', '["cu128"]')))


def test_everything_pruned_names_the_values_and_why_in_one_line(
    write_matrix: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_matrix(BASE.replace('["cu124", "cu126"]', '["cu128"]'))
    with pytest.raises(BadInput) as err:
        matrix.load(path)
    message = str(err.value)
    assert err.value.exit_code == 2
    assert "\n" not in message
    assert message.startswith(f"{path}: [axes]: ")
    assert "all 2 combinations were pruned" in message
    # Which values (the axis that varies) and why (the stack facts' reason), for each group.
    assert "torch=2.4.1: torch 2.4.1 was never published for cu128" in message
    assert "torch=2.5.1: torch 2.5.1 was never published for cu128" in message
    assert main(["matrix", "-m", str(path)]) == 2
    out, errors = capsys.readouterr()
    assert out == ""
    assert errors.count("\n") == 1 and "torch 2.5.1 was never published for cu128" in errors


def test_everything_pruned_with_single_values_names_the_whole_stack(write_matrix: Callable[[str], Path]) -> None:
    text = BASE.replace('["2.4.1", "2.5.1"]', '["2.5.1"]').replace('["cu124", "cu126"]', '["cpu"]')
    text = text.replace('cudnn = ["bundled"]', 'cudnn = ["9.5.1.17"]')
    with pytest.raises(BadInput) as err:
        matrix.load(write_matrix(text))
    assert ("the only combination was pruned: torch=2.5.1 cuda=cpu cudnn=9.5.1.17 python=3.11: "
            "a cuDNN override on a cpu wheel") in str(err.value)


def test_everything_pruned_groups_reasons_and_stays_bounded(write_matrix: Callable[[str], Path]) -> None:
    text = BASE.replace('["2.4.1", "2.5.1"]', '["2.4.1", "2.5.1", "2.6.0", "2.7.1", "2.8.0"]')
    text = text.replace('["cu124", "cu126"]', '["cu130"]').replace('["3.11"]', '["3.8", "3.9"]')
    with pytest.raises(BadInput) as err:
        matrix.load(write_matrix(text))
    message = str(err.value)
    assert "all 10 combinations were pruned" in message
    assert "torch=2.4.1 (2 combinations): torch 2.4.1 was never published for cu130" in message
    assert "and 1 more reason" in message
    assert len(message) < 1000


def test_everything_excluded_says_so(write_matrix: Callable[[str], Path]) -> None:
    text = BASE + '[[exclude]]\ncuda = "cu124"\n'
    with pytest.raises(BadInput) as err:
        matrix.load(write_matrix(text))
    message = str(err.value)
    assert "no cells" in message
    assert "2 combinations excluded by [[exclude]]" in message
    assert "the other 2 were pruned" in message
    assert "cuda=cu126" in message and "never published for cu126" in message
    with pytest.raises(BadInput, match=r"every combination was excluded by \[\[exclude\]\]"):
        matrix.load(write_matrix(BASE + '[[exclude]]\nlane = "baremetal"\n'))


def test_no_axes_and_no_include_says_what_to_give(write_matrix: Callable[[str], Path]) -> None:
    with pytest.raises(BadInput, match=r"no cells: give \[axes\] or \[\[include\]\]"):
        matrix.load(write_matrix('name = "t"\n'))


def test_everything_pruned_names_the_widest_reasons_first(write_matrix: Callable[[str], Path]) -> None:
    text = BASE.replace('["cu124", "cu126"]', '["cu130", "cpu"]').replace('["bundled"]', '["bundled", "9.5.1.17"]')
    text = text.replace('["2.4.1", "2.5.1"]', '["2.4.1", "2.5.1", "2.6.0"]')
    text += '[[exclude]]\ncuda = "cpu"\ncudnn = "bundled"\n'
    with pytest.raises(BadInput) as err:
        matrix.load(write_matrix(text))
    message = str(err.value)
    assert "3 combinations excluded by [[exclude]], the other 9 were pruned: " in message
    assert message.index("cuda=cpu cudnn=9.5.1.17 (3 combinations): a cuDNN override on a cpu wheel") < message.index(
        "torch=2.4.1 cuda=cu130 (2 combinations): torch 2.4.1 was never published for cu130")


def test_matrix_name_with_control_characters_is_rejected(write_matrix: Callable[[str], Path]) -> None:
    with pytest.raises(BadInput, match=r"name: 'night\\x1b\[2Jly' holds control"):
        matrix.load(write_matrix(BASE.replace('name = "t"', 'name = "night\\u001b[2Jly"')))


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (BASE.replace('python = ["3.11"]', 'python = ["3.\u0661\u0661"]'), "[axes].python[0]"),
        (BASE.replace('python = ["3.11"]', 'python = ["3.11", "3.\uff11\uff12"]'), "[axes].python[1]"),
        (BASE.replace('"2.5.1"]', '"2.\u0665.1"]'), "[axes].torch[1]"),
        (BASE.replace('"cu126"]', '"cu\u0661\u0662\u0666"]'), "[axes].cuda[1]"),
        (BASE + '[[include]]\nlane = "baremetal"\ntorch = "2.5.1"\ncuda = "cu124"\npython = "3.\u0661\u0662"\n',
         "[[include]] #1.python"),
        (BASE + '[control]\ntorch = "2.\u0665.1"\ncuda = "cu124"\n', "[control].torch"),
        (BASE + '[[exclude]]\ncudnn = "9.\u0665.1.17"\n', "[[exclude]] #1.cudnn"),
    ],
)
def test_non_ascii_digits_are_rejected_naming_the_field(write_matrix: Callable[[str], Path], text: str,
                                                        where: str) -> None:
    path = write_matrix("")
    path.write_text(text, encoding="utf-8")
    with pytest.raises(BadInput, match=re.escape(where)) as err:
        matrix.load(path)
    assert str(path) in str(err.value)
    assert err.value.exit_code == 2


@pytest.mark.parametrize("path", ["matrix/default.toml", "matrix/nightly.toml",
                                  "matrix/examples/upgrade.toml", "matrix/examples/fix-proof.toml"])
def test_shipped_matrices_load_with_a_control(path: str) -> None:
    from testkit import REPO

    m = matrix.load(REPO / path)
    assert m.control is not None and m.control in m.cells


def test_an_include_may_be_optional_and_the_default_matrix_host_cell_is(write_matrix: Callable[[str], Path]) -> None:
    m = matrix.load(write_matrix(BASE + '[[include]]\nlane = "host"\noptional = true\n'))
    assert m.optional == frozenset({"host"})
    assert "host" in [c.id for c in m.cells]
    default = matrix.load(Path(__file__).resolve().parents[3] / "matrix" / "default.toml")
    assert default.optional == frozenset({"host"}) and default.control is not None
    assert default.control.id not in default.optional


@pytest.mark.parametrize("value", ['"yes"', "1", "[]"])
def test_optional_must_be_a_boolean(write_matrix: Callable[[str], Path], value: str) -> None:
    with pytest.raises(BadInput, match=r"\[\[include\]\] #1.optional: must be true or false"):
        matrix.load(write_matrix(BASE + f'[[include]]\nlane = "host"\noptional = {value}\n'))


def test_the_fleet_table_names_the_gpu_generations_a_merge_must_cover(write_matrix: Callable[[str], Path]) -> None:
    m = matrix.load(write_matrix(BASE + '[fleet]\ngpus = ["h100-sm90", "a100-sm80", "h100-sm90"]\n'))
    assert m.fleet_gpus == ("h100-sm90", "a100-sm80")
    # Issue 37: a MIG slice is a GPU key of its own, e.g. the H200 queues of a fleet of slices.
    sliced = matrix.load(write_matrix(BASE + '[fleet]\ngpus = ["h200-sm90-mig1g-18gb", "h200-sm90-mig2g-35gb"]\n'))
    assert sliced.fleet_gpus == ("h200-sm90-mig1g-18gb", "h200-sm90-mig2g-35gb")


@pytest.mark.parametrize("gpus", ['"h100-sm90"', '["../x"]', '["H100"]', '["a/b"]', "[1]", '["a@b"]', '["h200"]',
                                  '["h200-sm90-mig3g.71gb"]'])
def test_a_bad_fleet_gpu_key_is_bad_input(write_matrix: Callable[[str], Path], gpus: str) -> None:
    with pytest.raises(BadInput, match=r"\[fleet\].gpus"):
        matrix.load(write_matrix(BASE + f"[fleet]\ngpus = {gpus}\n"))


def test_an_unknown_fleet_key_is_bad_input(write_matrix: Callable[[str], Path]) -> None:
    with pytest.raises(BadInput, match=r"\[fleet\]: .*'nodes'"):
        matrix.load(write_matrix(BASE + "[fleet]\nnodes = 3\n"))


def test_case_files_resolve_against_the_matrix_file(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix(BASE.replace('name = "t"', 'name = "t"\ncases = ["cases/prod.toml"]'))
    (path.parent / "cases").mkdir()
    (path.parent / "cases" / "prod.toml").write_text("")
    assert matrix.load(path).cases == ((path.parent / "cases" / "prod.toml").resolve(),)
    assert matrix.load(write_matrix(BASE)).cases == ()


@pytest.mark.parametrize(("value", "says"), [
    ('["nowhere.toml"]', "nowhere.toml: no such case file (paths are relative to the matrix file)"),
    ('"prod.toml"', "expected a list of at most 64 case file paths"),
    ('["a\\u0007b"]', "is not a path"),
    ("[1]", "is not a path"),
])
def test_a_bad_case_file_entry_names_the_field(write_matrix: Callable[[str], Path], value: str, says: str) -> None:
    with pytest.raises(BadInput) as caught:
        matrix.load(write_matrix(BASE.replace('name = "t"', f'name = "t"\ncases = {value}')))
    assert ": cases: " in str(caught.value) and says in str(caught.value)


def test_the_container_engine_is_a_matrix_key_and_a_run_option(write_matrix: Callable[[str], Path]) -> None:
    """Issue 26, item 1: [container].engine, and --engine over it; the same cell ids either way."""
    text = BASE.replace('lane = ["baremetal"]', 'lane = ["container", "baremetal"]')
    docker = matrix.load(write_matrix(text + '[container]\nbase = "convmatrix/base:bookworm"\n'))
    podman = matrix.load(write_matrix(text + '[container]\nbase = "convmatrix/base:bookworm"\nengine = "podman"\n'))
    assert [c.id for c in docker.cells] == [c.id for c in podman.cells]
    assert {(c.lane, c.engine) for c in docker.cells} == {("container", "docker"), ("baremetal", "")}
    assert {(c.lane, c.engine) for c in podman.cells} == {("container", "podman"), ("baremetal", "")}
    assert all("engine" not in c.values() for c in podman.cells)  # not an axis: include/exclude never see it
    moved = docker.through("podman")
    assert {c.engine for c in moved.lane("container")} == {"podman"} and moved.lane("baremetal") == docker.lane("baremetal")
    with pytest.raises(BadInput, match="--engine 'lxc' is not one of docker, podman"):
        docker.through("lxc")


@pytest.mark.parametrize("value", ['"lxc"', '"podman; rm -rf /"', "1", '["podman"]', '""'])
def test_a_bad_engine_names_the_field(write_matrix: Callable[[str], Path], value: str) -> None:
    text = BASE.replace('lane = ["baremetal"]', 'lane = ["container"]')
    with pytest.raises(BadInput, match=r"\[container\]\.engine.*is not one of docker, podman"):
        matrix.load(write_matrix(text + f'[container]\nbase = "convmatrix/base:bookworm"\nengine = {value}\n'))


def test_expected_skips_apply_to_the_cells_their_globs_match(write_matrix: Callable[[str], Path]) -> None:
    m = matrix.load(write_matrix(BASE + '[[include]]\nlane = "host"\n'
                                 '[[expected_skip]]\ncells = ["host"]\ncases = ["conv1d-*", "*-bf16-*"]\n'
                                 'reason = "no bf16 conv1d kernel on this CPU"\n'))
    assert m.skips_for("host") == [{"cases": ["conv1d-*", "*-bf16-*"], "reason": "no bf16 conv1d kernel on this CPU"}]
    assert all(m.skips_for(c.id) == [] for c in m.cells if c.id != "host")


@pytest.mark.parametrize(("entry", "field"), [
    ('cells = ["host"]\ncases = ["x"]\n', "expected_skip[0].reason"),
    ('cells = ["host"]\ncases = []\nreason = "r"\n', "expected_skip[0].cases"),
    ('cells = "host"\ncases = ["x"]\nreason = "r"\n', "expected_skip[0].cells"),
    ('cells = ["nope-*"]\ncases = ["x"]\nreason = "r"\n', "expected_skip[0].cells"),
    ('cells = ["host"]\ncases = ["x"]\nreason = "r"\nwhy = 1\n', "expected_skip[0]"),
    ('cells = ["host"]\ncases = ["x\\u0000"]\nreason = "r"\n', "expected_skip[0].cases"),
])
def test_a_bad_expected_skip_names_its_field(write_matrix: Callable[[str], Path], entry: str, field: str) -> None:
    with pytest.raises(BadInput, match=re.escape(field)):
        matrix.load(write_matrix(BASE + '[[include]]\nlane = "host"\n[[expected_skip]]\n' + entry))


def test_allow_cpu_is_a_boolean_and_cuda_stacks_are_the_cu_variants(write_matrix: Callable[[str], Path]) -> None:
    assert not matrix.load(write_matrix(BASE)).allow_cpu
    assert matrix.load(write_matrix('allow_cpu = true\n' + BASE)).allow_cpu
    with pytest.raises(BadInput, match=re.escape(": allow_cpu: must be true or false")):
        matrix.load(write_matrix('allow_cpu = "yes"\n' + BASE))
    assert all(c.cuda_stack for c in matrix.load(write_matrix(BASE)).cells)
    assert not matrix.load(write_matrix(BASE.replace('["cu124", "cu126"]', '["cpu"]'))).cells[0].cuda_stack
