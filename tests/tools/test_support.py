"""The tool tests' tree builder: each kind of entry is what its name says."""

from __future__ import annotations

import os
from pathlib import Path

from tests.tools.support import KINDS, plant


def test_plant_makes_each_kind_and_skips_clashes(tmp_path: Path) -> None:
    """Every kind is made as named; a taken path, or one under a file or a link, is left out."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    entries = [(("x", kind.replace(".", "_")), kind) for kind in KINDS]
    plant(root, outside, [*entries, (("x", "file"), "dir"), (("x", "file", "y"), "file")])
    made = {kind: root / "x" / kind.replace(".", "_") for kind in KINDS}
    assert made["file"].is_file() and not made["file"].is_symlink()
    assert made["dir"].is_dir() and not made["dir"].is_symlink()
    assert os.readlink(made["link_to_root"]) == str(root)
    assert os.readlink(made["link_in"]) == "../a"
    assert os.readlink(made["link_to_a.py"]) == str(root / "a.py")
    assert os.readlink(made["link_to_b"]) == str(root / "b")
    assert os.readlink(made["link_out"]) == str(outside)
    assert os.readlink(made["link_up"]) == str(tmp_path)
    assert os.readlink(made["broken_link"]) == str(root / "nowhere")
    assert os.readlink(made["broken_relative"]) == "nowhere"
    assert os.readlink(made["loop_link"]) == str(made["loop_link"])
    assert os.readlink(made["loop_relative"]) == "loop_relative"
    assert sorted(os.listdir(root / "x")) == sorted(path.name for path in made.values())
