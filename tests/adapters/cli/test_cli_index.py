"""``aptix index`` and the ``[retrieval]`` table: the index built from the configuration's
folder with progress on stderr, re-indexing only what changed, one-line errors for
bad paths, and ``aptix run`` / ``aptix serve`` retrieving from it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from knowledge_kit import write_corpus
from repo import ROOT

from aptix_pipeline.adapters.config.service import (
    ConfigError,
    load_service_config,
    parse_service_config,
)
from aptix_pipeline.adapters.embedded import build_pipeline
from aptix_pipeline.adapters.retrieval.fts import FtsRetriever

APTIX = Path(sys.executable).parent / "aptix"


def _aptix(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(APTIX), *args], capture_output=True, text=True, check=False, cwd=cwd)


def _config(directory: Path, retrieval: str) -> Path:
    path = directory / "aptix.toml"
    path.write_text(f"[retrieval]\n{retrieval}\n", encoding="utf-8")
    return path


@pytest.mark.decision("D337")
def test_index_builds_the_folder_with_progress_then_reindexes_only_what_changed(
    tmp_path: Path,
) -> None:
    write_corpus(tmp_path / "docs")
    _config(tmp_path, 'folder = "docs"')

    first = _aptix(tmp_path, "index", "--config", "aptix.toml", "--progress-every", "2")
    (tmp_path / "docs" / "notes.txt").write_text("Rewritten notes.\n", encoding="utf-8")
    second = _aptix(tmp_path, "index", "--config", "aptix.toml", "--progress-every", "2")

    assert first.returncode == 0, first.stderr
    assert first.stderr.splitlines() == [
        "aptix index: 2/4 documents",
        "aptix index: 4/4 documents",
    ]
    assert first.stdout == (
        f"indexed 4 documents of {tmp_path / 'docs'} into {tmp_path / 'retrieval.db'}: "
        "4 added, 0 updated, 0 removed, 0 unchanged\n"
    )
    assert second.returncode == 0, second.stderr
    assert second.stdout.endswith("0 added, 1 updated, 0 removed, 3 unchanged\n")


def test_a_short_run_shows_no_progress_lines(tmp_path: Path) -> None:
    write_corpus(tmp_path / "docs")
    _config(tmp_path, 'folder = "docs"\nindex = "kb.db"')

    run = _aptix(tmp_path, "index", "--config", "aptix.toml")

    assert run.returncode == 0
    assert run.stderr == ""
    assert (tmp_path / "kb.db").is_file()


@pytest.mark.decision("D337", "D340")
@pytest.mark.parametrize(
    ("retrieval", "config", "message"),
    [
        ('folder = "missing"', "aptix.toml", "missing: not a folder of documents"),
        ('folder = "docs"\nindex = "no/such/dir/kb.db"', "aptix.toml", "does not exist"),
        ('folder = "docs"\nindex = "docs"', "aptix.toml", "cannot open the index"),
        ('folder = "docs"', "elsewhere.toml", "elsewhere.toml: cannot read"),
        ('folder = "docs"\nlimit = 0', "aptix.toml", "[retrieval].limit"),
        ('folder = "docs"\nboost = 2', "aptix.toml", "[retrieval].boost"),
    ],
    ids=["no-folder", "no-index-dir", "index-is-a-dir", "no-config", "limit-0", "unknown-key"],
)
def test_bad_paths_and_keys_exit_2_with_one_line(
    tmp_path: Path, retrieval: str, config: str, message: str
) -> None:
    write_corpus(tmp_path / "docs")
    _config(tmp_path, retrieval)

    run = _aptix(tmp_path, "index", "--config", config)

    assert run.returncode == 2
    assert len(run.stderr.splitlines()) == 1, run.stderr
    assert run.stderr.startswith("aptix index: ")
    assert message in run.stderr
    assert run.stdout == ""


def test_a_configuration_without_retrieval_has_nothing_to_index(tmp_path: Path) -> None:
    (tmp_path / "aptix.toml").write_text("[engine]\nllm_attempts = 1\n", encoding="utf-8")

    run = _aptix(tmp_path, "index", "--config", "aptix.toml")

    assert run.returncode == 2
    assert run.stderr == "aptix index: aptix.toml: no [retrieval] table: nothing to index\n"


@pytest.mark.decision("D340")
def test_the_retrieval_table_defaults_its_index_collection_and_limit(tmp_path: Path) -> None:
    config = parse_service_config(
        {"retrieval": {"folder": "knowledge"}}, source="aptix.toml", base_dir=tmp_path
    )
    limited = parse_service_config(
        {"retrieval": {"folder": "kb", "index": "i.db", "limit": 2, "collection": "handbook"}},
        base_dir=tmp_path,
    )

    assert config.retrieval is not None
    assert config.retrieval.folder == tmp_path / "knowledge"
    assert config.retrieval.index == tmp_path / "retrieval.db"
    assert config.retrieval.collection == "knowledge"
    assert config.options.retrieval_limit == 5
    assert limited.retrieval is not None
    assert (limited.retrieval.collection, limited.options.retrieval_limit) == ("handbook", 2)


@pytest.mark.decision("D340")
def test_a_pipeline_of_the_configuration_retrieves_from_its_index(tmp_path: Path) -> None:
    write_corpus(tmp_path / "docs")
    path = tmp_path / "aptix.toml"
    path.write_text(
        '[retrieval]\nfolder = "docs"\ncollection = "handbook"\n'
        '[model]\nkind = "scripted"\nscript = "script.json"\n',
        encoding="utf-8",
    )
    (tmp_path / "script.json").write_text('[{"text": "ok"}]', encoding="utf-8")
    config = load_service_config(path)

    with pytest.raises(ConfigError, match=r"no index here.*aptix index --config"):
        build_pipeline(config, store="memory")
    assert _aptix(tmp_path, "index", "--config", "aptix.toml").returncode == 0
    pipeline = build_pipeline(config, store="memory")  # what aptix serve builds

    assert isinstance(pipeline.ports.retriever, FtsRetriever)
    assert pipeline.ports.retriever.collection == "handbook"


@pytest.mark.decision("D340")
def test_aptix_run_retrieves_with_the_configurations_index(tmp_path: Path) -> None:
    write_corpus(tmp_path / "docs")
    _config(tmp_path, 'folder = "docs"\ncollection = "handbook"\nlimit = 2')
    (tmp_path / "request.json").write_text(
        json.dumps({"Instruction": "deploy the docker image"}), encoding="utf-8"
    )
    (tmp_path / "script.json").write_text('[{"text": "ok"}]', encoding="utf-8")
    args = ("run", "request.json", "--config", "aptix.toml", "--llm-script", "script.json")

    unindexed = _aptix(tmp_path, *args, "--store", "memory")
    _aptix(tmp_path, "index", "--config", "aptix.toml")
    run = _aptix(tmp_path, *args, "--store", "memory", "--trace")

    assert unindexed.returncode == 2
    assert "aptix index --config aptix.toml" in unindexed.stderr
    assert run.returncode == 0, run.stderr
    assert "retrieval   collection=handbook limit=2 hits=2" in run.stderr


@pytest.mark.decision("D339")
def test_aptix_replay_live_asks_the_configurations_retriever_again(tmp_path: Path) -> None:
    write_corpus(tmp_path / "docs")
    _config(tmp_path, 'folder = "docs"\ncollection = "handbook"\nlimit = 2')
    (tmp_path / "request.json").write_text(
        json.dumps({"Instruction": "deploy the docker image"}), encoding="utf-8"
    )
    (tmp_path / "script.json").write_text('[{"text": "ok"}]', encoding="utf-8")
    _aptix(tmp_path, "index", "--config", "aptix.toml")
    args = ("run", "request.json", "--config", "aptix.toml", "--llm-script", "script.json")
    assert _aptix(tmp_path, *args, "--store", "memory", "--record", "rec").returncode == 0

    same = _aptix(tmp_path, "replay", "rec", "--live", "aptix.toml", "--quiet")
    (tmp_path / "docs" / "deploy-guide.md").write_text(
        "# Deploying\n\nDeploy the docker image with the deploy docker command.\n",
        encoding="utf-8",
    )
    _aptix(tmp_path, "index", "--config", "aptix.toml")
    changed = _aptix(tmp_path, "replay", "rec", "--live", "aptix.toml", "--quiet")

    assert same.returncode == 0, same.stdout + same.stderr
    assert changed.returncode == 1
    assert "Retriever.retrieve" in changed.stdout + changed.stderr


def test_the_example_handbook_indexes_and_answers_a_scoped_question(tmp_path: Path) -> None:
    examples = ROOT / "examples"
    shutil.copytree(examples / "knowledge", tmp_path / "knowledge")
    shutil.copy(examples / "retrieval.toml", tmp_path / "retrieval.toml")
    request, script = "knowledge/request.json", "knowledge/script.json"

    indexed = _aptix(tmp_path, "index", "--config", "retrieval.toml")
    run = _aptix(
        tmp_path,
        "run",
        request,
        "--config",
        "retrieval.toml",
        "--llm-script",
        script,
        "--store",
        "memory",
        "--trace",
    )

    assert indexed.returncode == 0, indexed.stderr
    assert "4 added" in indexed.stdout
    assert run.returncode == 0, run.stderr
    assert "retrieval   collection=handbook limit=3 conditions=2 hits=3" in run.stderr


@pytest.mark.decision("D340")
def test_aptix_serve_refuses_to_start_before_the_index_is_built(tmp_path: Path) -> None:
    write_corpus(tmp_path / "docs")
    (tmp_path / "script.json").write_text('[{"text": "ok"}]', encoding="utf-8")
    (tmp_path / "aptix.toml").write_text(
        '[retrieval]\nfolder = "docs"\n[model]\nkind = "scripted"\nscript = "script.json"\n'
        '[[auth.keys]]\norg = "acme"\nuser = "ana"\n'
        f'key_sha256 = "{"0" * 64}"\n',
        encoding="utf-8",
    )

    run = _aptix(tmp_path, "serve", "--config", "aptix.toml", "--port", "0")

    assert run.returncode == 2
    assert len(run.stderr.splitlines()) == 1, run.stderr
    assert "no index here" in run.stderr
    assert "aptix index --config aptix.toml" in run.stderr


def _open_files(path: Path) -> int:
    """How many of this process's file descriptors are ``path`` (Linux ``/proc``)."""
    target = path.resolve()
    count = 0
    for fd in Path("/proc/self/fd").iterdir():
        try:
            count += Path(fd).resolve() == target
        except OSError:  # closed between listing and reading
            continue
    return count


@pytest.mark.decision("D340")
async def test_the_service_closes_its_retrievers_index_when_it_stops(tmp_path: Path) -> None:
    from aptix_pipeline.adapters.http.app import create_app

    write_corpus(tmp_path / "docs")
    path = tmp_path / "aptix.toml"
    path.write_text(
        '[retrieval]\nfolder = "docs"\n[model]\nkind = "scripted"\nscript = "script.json"\n'
        '[store]\nurl = "memory"\n',
        encoding="utf-8",
    )
    (tmp_path / "script.json").write_text('[{"text": "ok"}]', encoding="utf-8")
    assert _aptix(tmp_path, "index", "--config", "aptix.toml").returncode == 0
    app = create_app(load_service_config(path))
    index = tmp_path / "retrieval.db"

    async with app.router.lifespan_context(app):
        serving = _open_files(index)

    assert serving >= 1
    assert _open_files(index) == 0
