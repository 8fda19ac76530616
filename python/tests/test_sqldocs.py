"""The generated SQL reference: complete, deterministic, and a stale or uncommented schema is reported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import ROOT

from tenure.testing.sqldocs import MissingComment, generate, main


def test_reference_names_every_public_function_and_is_deterministic(
    admin: psycopg.Connection[Any], admin_conninfo: str
) -> None:
    text = generate(admin_conninfo)
    assert text == generate(admin_conninfo)
    names = [
        r[0]
        for r in admin.execute(
            "SELECT proname FROM pg_proc WHERE pronamespace = 'tenure'::regnamespace AND proname !~ '^_'"
        )
    ]
    assert names
    for name in names:
        assert f"### tenure.{name}\n" in text
    assert "### tenure.heartbeat_status\n" in text  # views
    assert "### tenure.task_lease\n" in text  # result types


def test_check_reports_a_stale_page(
    admin_conninfo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "sql-reference.md"
    assert main(["--db", admin_conninfo, "--output", str(page)]) == 0
    assert main(["--db", admin_conninfo, "--check", str(page)]) == 0
    page.write_text(page.read_text().replace("True only if", "Only if"))
    assert main(["--db", admin_conninfo, "--check", str(page)]) == 1
    err = capsys.readouterr().err
    assert "-Only if instance" in err and "+True only if instance" in err
    assert f"{page} is stale: run make docs" in err


def test_a_public_function_without_comment_is_refused(
    admin: psycopg.Connection[Any], admin_conninfo: str, capsys: pytest.CaptureFixture[str]
) -> None:
    admin.execute("COMMENT ON FUNCTION tenure.get_primary(text) IS NULL")
    with pytest.raises(MissingComment, match=r"function tenure.get_primary\(p_utype text\)"):
        generate(admin_conninfo)
    assert main(["--db", admin_conninfo, "--check", str(ROOT / "docs" / "sql-reference.md")]) == 1
    assert "no COMMENT ON text for: function tenure.get_primary" in capsys.readouterr().err


def test_quotes_of_comments_in_a_hand_written_page_are_checked(
    admin_conninfo: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "sql.md"
    page.write_text((ROOT / "docs" / "sql.md").read_text())
    assert main(["--db", admin_conninfo, "--check-quotes", str(page)]) == 0
    page.write_text(page.read_text().replace("> Send a heartbeat for", "> Send one heartbeat for"))
    assert main(["--db", admin_conninfo, "--check-quotes", str(page)]) == 1
    assert "quotes COMMENT ON texts that changed: update_heartbeat;" in capsys.readouterr().err
