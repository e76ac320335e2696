"""The `planner` console commands print the catalogs."""

from __future__ import annotations

from typer.testing import CliRunner

from planner.cli import app


def test_gpus_command_lists_the_catalog():
    result = CliRunner().invoke(app, ["gpus"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "h100-sxm" in result.output and "mi300x" in result.output


def test_models_command_lists_the_catalog():
    result = CliRunner().invoke(app, ["models"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "meta-llama/Llama-3.1-70B" in result.output


def test_serve_help_offers_host_and_port():
    result = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "--host" in result.output and "--port" in result.output


def test_a_bad_hardware_dir_is_one_line_and_exit_1(tmp_path):
    missing = tmp_path / "absent"
    result = CliRunner().invoke(app, ["gpus", "--hardware-dir", str(missing)], env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert "CatalogError" in result.output and "Traceback" not in result.output
