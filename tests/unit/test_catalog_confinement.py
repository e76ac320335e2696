"""Catalog directories cannot read outside themselves, and no catalog file can exhaust the loader.

``planner.hardware.load_catalog(user_dir)`` reads an operator's directory (``PLANNER_HARDWARE_DIR``);
``planner.models.load_model_catalog(directory)`` follows the ``file`` names of an ``index.json``.
Both refuse symbolic links, paths that leave the directory, files that are not regular files,
files over ``MAX_CATALOG_FILE_BYTES``, non-UTF-8 text and JSON nested deeper than
``MAX_CATALOG_JSON_DEPTH``; each refusal is a ``CatalogError`` naming the file and the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

from planner.errors import CatalogError
from planner.hardware import (
    MAX_CATALOG_FILE_BYTES,
    MAX_CATALOG_JSON_DEPTH,
    builtin_catalog_dir,
    load_catalog,
    read_catalog_json,
)
from planner.models import CATALOG_DIR, load_model_catalog

#: a built-in model and its config file, copied into the temporary model catalogs below
MODEL_ID = "meta-llama/Llama-3.1-8B"

needs_symlinks = pytest.mark.skipif(not hasattr(os, "symlink") or os.name == "nt",
                                    reason="symbolic links need a POSIX file system")


def _gpu(gpu_id: str, *, like: str = "h100-sxm") -> dict[str, Any]:
    """A built-in GPU file's content under a new id."""
    entry = json.loads((builtin_catalog_dir() / f"{like}.json").read_text(encoding="utf-8"))
    entry["id"] = gpu_id
    return entry


def _write(directory: Path, name: str, data: Any) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _refused(call: Any, *args: Any) -> CatalogError:
    with pytest.raises(CatalogError) as info:
        call(*args)
    return info.value


# ------------------------------------------------------------------------------------------------
# Hardware catalog: the operator's directory
# ------------------------------------------------------------------------------------------------
def test_valid_user_dir_still_loads(tmp_path):
    _write(tmp_path, "h100-sxm-lab.json", _gpu("h100-sxm-lab"))
    merged = load_catalog(tmp_path)
    builtin = load_catalog()
    assert set(merged) == set(builtin) | {"h100-sxm-lab"}
    assert merged["h100-sxm-lab"].peak_flops_per_s == builtin["h100-sxm"].peak_flops_per_s


@needs_symlinks
def test_symlink_to_a_file_outside_is_refused(tmp_path):
    outside = _write(tmp_path / "outside", "secret.json", _gpu("lab-gpu"))
    user = tmp_path / "user"
    user.mkdir()
    (user / "lab-gpu.json").symlink_to(outside)
    error = _refused(load_catalog, user)
    assert error.extra["file"].endswith("lab-gpu.json")
    assert "symbolic link" in error.detail


@needs_symlinks
def test_symlink_inside_families_is_refused(tmp_path):
    hopper = builtin_catalog_dir() / "families" / "hopper.json"
    families = tmp_path / "user" / "families"
    families.mkdir(parents=True)
    (families / "lab.json").symlink_to(hopper)
    error = _refused(load_catalog, tmp_path / "user")
    assert error.extra["file"].endswith("lab.json") and "symbolic link" in error.detail


@needs_symlinks
def test_symlinked_families_dir_is_refused(tmp_path):
    real = tmp_path / "elsewhere"
    _write(real, "lab.json", {"family": "lab", "inherits_from": "hopper", "reason": "same silicon"})
    user = tmp_path / "user"
    user.mkdir()
    (user / "families").symlink_to(real, target_is_directory=True)
    error = _refused(load_catalog, user)
    assert error.extra["file"].endswith("families") and "symbolic link" in error.detail


def test_families_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "families").write_text("{}", encoding="utf-8")
    error = _refused(load_catalog, tmp_path)
    assert error.extra["file"].endswith("families") and "directory" in error.detail


@needs_symlinks
def test_symlinked_user_dir_itself_is_followed_but_its_contents_stay_confined(tmp_path):
    real = tmp_path / "real"
    _write(real, "lab-gpu.json", _gpu("lab-gpu"))
    link = tmp_path / "configured"
    link.symlink_to(real, target_is_directory=True)
    assert "lab-gpu" in load_catalog(link)

    outside = _write(tmp_path / "outside", "x.json", _gpu("other-gpu"))
    (real / "other-gpu.json").symlink_to(outside)
    error = _refused(load_catalog, link)
    assert error.extra["file"].endswith("other-gpu.json")


def test_oversized_file_is_refused_naming_file_and_limit(tmp_path):
    text = json.dumps(_gpu("big-gpu"))
    path = tmp_path / "big-gpu.json"
    path.write_text(text + " " * (MAX_CATALOG_FILE_BYTES + 1 - len(text)), encoding="utf-8")
    assert path.stat().st_size == MAX_CATALOG_FILE_BYTES + 1
    error = _refused(load_catalog, tmp_path)
    assert error.extra["file"].endswith("big-gpu.json")
    assert str(MAX_CATALOG_FILE_BYTES) in error.detail and "big-gpu.json" in error.detail


def test_file_of_exactly_the_limit_loads(tmp_path):
    text = json.dumps(_gpu("big-gpu"))
    (tmp_path / "big-gpu.json").write_text(text + " " * (MAX_CATALOG_FILE_BYTES - len(text)),
                                           encoding="utf-8")
    assert "big-gpu" in load_catalog(tmp_path)


def test_non_utf8_file_is_refused(tmp_path):
    entry = _gpu("lab-gpu")
    entry["notes"] = "Ölkühlung"
    (tmp_path / "lab-gpu.json").write_bytes(json.dumps(entry, ensure_ascii=False).encode("latin-1"))
    error = _refused(load_catalog, tmp_path)
    assert error.extra["file"].endswith("lab-gpu.json") and "UTF-8" in error.detail


@pytest.mark.parametrize("depth", [MAX_CATALOG_JSON_DEPTH + 1, 100_000])
def test_deeply_nested_json_is_refused(tmp_path, depth):
    # 100 000 levels overflow the parser's recursion; just past the limit parses but is refused
    (tmp_path / "deep.json").write_text('{"notes": ' + "[" * depth + "]" * depth + "}", encoding="utf-8")
    error = _refused(load_catalog, tmp_path)
    assert error.extra["file"].endswith("deep.json")
    assert f"deeper than {MAX_CATALOG_JSON_DEPTH}" in error.detail


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs need POSIX")
def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "lab-gpu.json"
    os.mkfifo(fifo)
    assert isinstance(_refused(load_catalog, tmp_path), CatalogError)
    # the reader itself refuses it too, without waiting for a writer (a blocking open never returns)
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            read_catalog_json(fifo, display="lab-gpu.json")
        except CatalogError as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive(), "opening a FIFO blocked"
    assert outcome and "not a regular file" in str(outcome[0])


# ------------------------------------------------------------------------------------------------
# Model catalog: file names taken from index.json
# ------------------------------------------------------------------------------------------------
def _model_catalog(directory: Path, file_name: str | None = None) -> Path:
    """A one-model catalog in ``directory``: the built-in entry of ``MODEL_ID`` and its config.

    With ``file_name`` the index points there instead, and nothing is copied.
    """
    index = json.loads((CATALOG_DIR / "index.json").read_text(encoding="utf-8"))
    meta = dict(index["models"][MODEL_ID])
    if file_name is None:
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(CATALOG_DIR / meta["file"], directory / meta["file"])
    else:
        meta["file"] = file_name
    _write(directory, "index.json", {**index, "models": {MODEL_ID: meta}})
    return directory


def test_valid_model_catalog_still_loads(tmp_path):
    catalog = load_model_catalog(_model_catalog(tmp_path / "models"))
    assert catalog.ids() == [MODEL_ID]
    assert catalog.get(MODEL_ID) == load_model_catalog().get(MODEL_ID)


def test_config_in_a_subdirectory_loads(tmp_path):
    root = tmp_path / "models"
    builtin_file = json.loads((CATALOG_DIR / "index.json").read_text())["models"][MODEL_ID]["file"]
    (root / "meta").mkdir(parents=True)
    shutil.copyfile(CATALOG_DIR / builtin_file, root / "meta" / "config.json")
    _model_catalog(root, "meta/config.json")
    assert load_model_catalog(root).ids() == [MODEL_ID]


@pytest.mark.parametrize(
    ("file_name", "why"),
    [
        ("../outside.json", "'..'"),
        ("../../../../../../../../etc/passwd", "'..'"),
        ("sub/../../outside.json", "'..'"),
        ("sub/../config.json", "'..'"),  # stays inside, still refused: the rule is about the name
        ("..\\outside.json", "'..'"),
        ("/etc/passwd", "absolute"),
        ("\\\\server\\share\\config.json", "absolute"),
        ("C:\\config.json", "absolute"),
        ("", "non-empty"),
        ("config\x00.json", "NUL"),
    ],
)
def test_model_index_names_leaving_the_directory_are_refused(tmp_path, file_name, why):
    _write(tmp_path, "outside.json", {"model_type": "llama"})
    root = _model_catalog(tmp_path / "models", file_name)
    error = _refused(load_model_catalog, root)
    assert error.extra["file"] == str(root.resolve() / "index.json")
    assert error.extra["field"] == f"models.{MODEL_ID}.file"
    assert repr(file_name) in error.detail and why in error.detail


@needs_symlinks
def test_model_config_symlink_to_a_file_outside_is_refused(tmp_path):
    outside = tmp_path / "outside.json"
    shutil.copyfile(CATALOG_DIR / "meta-llama--Meta-Llama-3.1-8B.json", outside)
    root = _model_catalog(tmp_path / "models", "config.json")
    (root / "config.json").symlink_to(outside)
    error = _refused(load_model_catalog, root)
    assert "'config.json'" in error.detail and "symbolic link" in error.detail


@needs_symlinks
def test_model_config_under_a_symlinked_directory_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copyfile(CATALOG_DIR / "meta-llama--Meta-Llama-3.1-8B.json", elsewhere / "config.json")
    root = _model_catalog(tmp_path / "models", "sub/config.json")
    (root / "sub").symlink_to(elsewhere, target_is_directory=True)
    error = _refused(load_model_catalog, root)
    assert "'sub/config.json'" in error.detail and "symbolic link" in error.detail


@needs_symlinks
def test_symlinked_model_index_is_refused(tmp_path):
    real = _model_catalog(tmp_path / "real")
    root = tmp_path / "models"
    root.mkdir()
    shutil.copyfile(real / "meta-llama--Meta-Llama-3.1-8B.json", root / "meta-llama--Meta-Llama-3.1-8B.json")
    (root / "index.json").symlink_to(real / "index.json")
    error = _refused(load_model_catalog, root)
    assert error.extra["file"].endswith("index.json") and "symbolic link" in error.detail


def test_oversized_model_config_is_refused_naming_file_and_limit(tmp_path):
    root = _model_catalog(tmp_path / "models", "huge.json")
    with (root / "huge.json").open("w", encoding="utf-8") as handle:
        handle.write('{"model_type": "llama", "padding": "' + "x" * MAX_CATALOG_FILE_BYTES + '"}')
    error = _refused(load_model_catalog, root)
    assert error.extra["file"].endswith("huge.json")
    assert "huge.json" in error.detail and str(MAX_CATALOG_FILE_BYTES) in error.detail


def test_model_config_that_is_not_an_object_is_refused(tmp_path):
    root = _model_catalog(tmp_path / "models", "list.json")
    (root / "list.json").write_text("[1, 2, 3]", encoding="utf-8")
    error = _refused(load_model_catalog, root)
    assert error.extra["file"].endswith("list.json") and "object" in error.detail


def test_missing_model_catalog_directory_is_an_error(tmp_path):
    error = _refused(load_model_catalog, tmp_path / "nope")
    assert "nope" in error.detail
