from __future__ import annotations

import re

import pytest

from convmatrix import matrix
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


def test_expands_product_and_prunes_with_reason(write_matrix):
    m = matrix.load(write_matrix(BASE))
    assert [c.id for c in m.cells] == [
        "baremetal-torch2.4.1-cu124-cudnnbundled-py3.11",
        "baremetal-torch2.5.1-cu124-cudnnbundled-py3.11",
    ]
    reasons = {(p.values["torch"], p.values["cuda"]): p.reason for p in m.pruned}
    assert set(reasons) == {("2.4.1", "cu126"), ("2.5.1", "cu126")}
    assert "never published for cu126" in reasons[("2.5.1", "cu126")]


def test_misspelt_key_names_key_and_file(write_matrix):
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
def test_malformed_values_name_the_field(write_matrix, snippet, where):
    key = snippet.split(" =")[0]
    text = "\n".join(snippet if line.startswith(f"{key} =") else line for line in BASE.splitlines())
    with pytest.raises(BadInput, match=re.escape(where)):
        matrix.load(write_matrix(text))


def test_impossible_control_is_rejected_with_reason(write_matrix):
    text = BASE + '[control]\nlane = "baremetal"\ntorch = "2.4.1"\ncuda = "cu126"\n'
    with pytest.raises(BadInput, match=r"\[control\]: names an impossible stack: torch 2.4.1 was never published for cu126"):
        matrix.load(write_matrix(text))


def test_impossible_control_outside_axes_is_rejected_with_reason(write_matrix):
    text = BASE + '[control]\nlane = "baremetal"\ntorch = "2.8.0"\ncuda = "cu121"\ncudnn = "bundled"\npython = "3.11"\n'
    with pytest.raises(BadInput, match="never published for cu121"):
        matrix.load(write_matrix(text))


def test_control_must_be_unique(write_matrix):
    with pytest.raises(BadInput, match="matches 2 cells"):
        matrix.load(write_matrix(BASE + '[control]\ncuda = "cu124"\n'))


def test_control_and_host_include(write_matrix):
    m = matrix.load(write_matrix(BASE + '[[include]]\nlane = "host"\n[control]\ntorch = "2.5.1"\ncuda = "cu124"\n'))
    assert m.control is not None and m.control.id == "baremetal-torch2.5.1-cu124-cudnnbundled-py3.11"
    assert m.cells[-1].id == "host"


def test_include_of_impossible_stack_is_rejected(write_matrix):
    text = BASE + '[[include]]\nlane = "baremetal"\ntorch = "2.5.1"\ncuda = "cu124"\ncudnn = "8.9.7.29"\n'
    with pytest.raises(BadInput, match=r"\[\[include\]\] #1: impossible stack .*major 8"):
        matrix.load(write_matrix(text))


def test_exclude_partial_keys(write_matrix):
    m = matrix.load(write_matrix(BASE + '[[exclude]]\ntorch = "2.4.1"\n'))
    assert [c.torch for c in m.cells] == ["2.5.1"]
    assert all(p.values["torch"] != "2.4.1" for p in m.pruned)


def test_container_needs_base_and_base_axis_goes_into_id(write_matrix):
    text = BASE.replace('lane = ["baremetal"]', 'lane = ["container"]')
    with pytest.raises(BadInput, match="need a base image"):
        matrix.load(write_matrix(text))
    m = matrix.load(write_matrix(text + 'base = ["python:3.11-slim-bookworm", "convmatrix/base:bookworm"]\n'))
    assert m.cells[0].id == "container-torch2.4.1-cu124-cudnnbundled-py3.11-python-3.11-slim-bookworm"
    assert len({c.id for c in m.cells}) == len(m.cells) == 4


def test_not_toml_and_missing_file(write_matrix, tmp_path):
    with pytest.raises(BadInput, match="not valid TOML"):
        matrix.load(write_matrix("name = \n"))
    with pytest.raises(BadInput, match="no such matrix file"):
        matrix.load(tmp_path / "nope.toml")


def test_everything_pruned_is_an_error(write_matrix):
    with pytest.raises(BadInput, match="no cells"):
        matrix.load(write_matrix(BASE.replace('["cu124", "cu126"]', '["cu128"]')))


@pytest.mark.parametrize("path", ["matrix/default.toml", "matrix/nightly.toml",
                                  "matrix/examples/upgrade.toml", "matrix/examples/fix-proof.toml"])
def test_shipped_matrices_load_with_a_control(path):
    from conftest import REPO

    m = matrix.load(REPO / path)
    assert m.control is not None and m.control in m.cells
