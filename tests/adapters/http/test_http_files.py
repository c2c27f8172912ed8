"""``GET /v1/files/{hash}`` (adapters/http/files.py) and the ``LocalFileStore`` behind it.

A file a server tool made comes back as a ``FileRef`` whose URL a real ``aptix
serve`` answers with the same bytes, without an API key (D324); a URL that is
expired, tampered with, or names a file the store does not hold is refused. The
refusals run against the app under a real uvicorn server in a thread; the store
is a real directory.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import httpx
import pytest
from engine_kit import REPORT_CATALOG
from http_kit import ANA, ENV, aptix_serve, write_config
from server_thread import server_thread

from aptix_pipeline.adapters.config.service import ConfigError, load_service_config
from aptix_pipeline.adapters.files.local import FileAccess, LocalFileStore
from aptix_pipeline.adapters.http.app import EXECUTE_PATH, create_app
from aptix_pipeline.adapters.system.clocks import SteppingClock
from aptix_pipeline.contracts import ToolFile

SIGNING_ENV = "APTIX_TEST_FILES_KEY"
SIGNING_KEY = "files signing key of the tests, 32+"
FILES_ENV = {**ENV, SIGNING_ENV: SIGNING_KEY}
URL_BASE = "https://files.example.test"
FILES = f"""
[files]
directory = "files"
url_base = "{URL_BASE}"
ttl_seconds = 600
signing_key_env = "{SIGNING_ENV}"
"""
REPORT_REPLIES: list[dict[str, Any]] = [
    {
        "tool_calls": [
            {
                "id": "r1",
                "name": "make_report",
                "arguments": {"title": "Weekly", "points": ["tests pass"]},
            }
        ]
    },
    {"text": "The report is attached."},
]
HELLO: list[dict[str, Any]] = [{"text": "Hello."}]
REPORT_BYTES = b"# Weekly\n\n- tests pass\n"
CONTENT = b"name,count\nfiles,1\n"


def _on(base: str, url: str) -> str:
    """``url``'s path and query on the server at ``base``."""
    parts = urlsplit(url)
    return f"{base}{parts.path}?{parts.query}"


@pytest.mark.decision("D324")
def test_aptix_serve_serves_a_tools_file_at_its_file_ref_url_without_an_api_key(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path, REPORT_REPLIES, more=REPORT_CATALOG + FILES)

    with aptix_serve(config, FILES_ENV) as (base, _), httpx.Client(timeout=10) as client:
        answer = client.post(base + EXECUTE_PATH, json={"Instruction": "report"}, headers=ANA)
        [ref] = answer.json()["Result"]["Files"]
        fetched = client.get(_on(base, ref["Url"]))  # no API key: the URL is the credential

    assert answer.status_code == 200
    assert ref["Url"].startswith(f"{URL_BASE}/v1/files/{ref['ContentHash']}?")
    assert fetched.status_code == 200
    assert fetched.content == REPORT_BYTES
    assert hashlib.sha256(fetched.content).hexdigest() == ref["ContentHash"]
    assert fetched.headers["content-type"].startswith("text/markdown")
    assert fetched.headers["content-length"] == str(ref["SizeBytes"])
    assert fetched.headers["etag"] == f'"{ref["ContentHash"]}"'
    assert fetched.headers["x-content-type-options"] == "nosniff"
    assert fetched.headers["content-disposition"].startswith("attachment")


def _service(tmp_path: Path) -> tuple[object, LocalFileStore]:
    """The app on a configuration with ``[files]``, and a store on the same directory and key
    (its clock at 2026-01-01) to sign URLs with."""
    config = load_service_config(write_config(tmp_path, HELLO, more=FILES), env=FILES_ENV)
    assert config.files is not None
    signer = LocalFileStore(
        config.files.directory,
        url_base="http://unused.test",
        signing_key=SIGNING_KEY.encode(),
        clock=SteppingClock(datetime(2026, 1, 1, tzinfo=UTC)),
        ttl_seconds=600,
    )
    return create_app(config), signer


async def _kept(signer: LocalFileStore) -> str:
    """A file kept in the store: its URL's path and query (expiring 600 s after 2026-01-01)."""
    stored = await signer.put(ToolFile(name="a.csv", mime_type="text/csv", content=CONTENT))
    return stored.url


@pytest.mark.decision("D322", "D323")
async def test_an_expired_file_url_is_410(tmp_path: Path) -> None:
    app, signer = _service(tmp_path)
    url = await _kept(signer)  # expired long before the server's clock (the system's) reads

    with server_thread(app) as port:
        answer = httpx.get(_on(f"http://127.0.0.1:{port}", url), timeout=10)

    assert answer.status_code == 410
    assert answer.json()["Errors"][0]["Code"] == "expired"


def _changed(url: str, key: str, value: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    path = parts.path
    if key == "hash":
        path = path.rsplit("/", 1)[0] + "/" + value
    else:
        query[key] = value
    return f"{parts.scheme}://{parts.netloc}{path}?{urlencode(query)}"


@pytest.mark.decision("D323")
@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("hash", hashlib.sha256(b"another file").hexdigest()),
        ("expires", "99999999999"),
        ("type", "text/html"),
        ("name", "index.html"),
        ("sig", "0" * 64),
        ("sig", ""),
    ],
    ids=["hash", "expires", "type", "name", "sig", "no-sig"],
)
async def test_a_tampered_file_url_is_403(tmp_path: Path, key: str, value: str) -> None:
    app, signer = _service(tmp_path)
    far = LocalFileStore(
        signer.directory,
        url_base="http://unused.test",
        signing_key=SIGNING_KEY.encode(),
        clock=SteppingClock(datetime(2100, 1, 1, tzinfo=UTC)),  # current for the server
    )
    url = _changed(await _kept(far), key, value)

    with server_thread(app) as port:
        answer = httpx.get(_on(f"http://127.0.0.1:{port}", url), timeout=10)

    assert answer.status_code == 403
    assert answer.json()["Errors"][0]["Code"] == "forbidden"


@pytest.mark.decision("D323")
async def test_a_signed_url_of_a_file_the_store_does_not_hold_is_404(tmp_path: Path) -> None:
    app, signer = _service(tmp_path)
    missing = hashlib.sha256(b"never kept").hexdigest()
    url = signer.url(missing, 4_102_444_800, "text/plain", "gone.txt")  # 2100-01-01

    with server_thread(app) as port:
        answer = httpx.get(_on(f"http://127.0.0.1:{port}", url), timeout=10)

    assert answer.status_code == 404


async def test_a_service_without_files_answers_404(tmp_path: Path) -> None:
    app = create_app(load_service_config(write_config(tmp_path, HELLO), env=ENV))

    with server_thread(app) as port:
        answer = httpx.get(f"http://127.0.0.1:{port}/v1/files/{'0' * 64}?sig=x", timeout=10)

    assert answer.status_code == 404


# --- the LocalFileStore on a real directory -------------------------------------------------


def _store(directory: Path, year: int = 2026) -> LocalFileStore:
    return LocalFileStore(
        directory,
        url_base="http://files.test/",
        signing_key=b"k" * 16,
        clock=SteppingClock(datetime(year, 1, 1, tzinfo=UTC)),
        ttl_seconds=60,
    )


def _parts(url: str) -> tuple[str, str, str, str, str]:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    return (
        parts.path.rsplit("/", 1)[1],
        query["expires"],
        query["type"],
        query["name"],
        query["sig"],
    )


@pytest.mark.decision("D331")
async def test_the_same_bytes_are_kept_once_under_their_hash(tmp_path: Path) -> None:
    store = _store(tmp_path)

    first = await store.put(ToolFile(name="a.csv", mime_type="text/csv", content=CONTENT))
    second = await store.put(ToolFile(name="b.txt", mime_type="text/plain", content=CONTENT))

    digest = hashlib.sha256(CONTENT).hexdigest()
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == [digest]
    assert store.path(digest).read_bytes() == CONTENT
    assert store.check(*_parts(first.url)) is FileAccess.GRANTED
    assert store.check(*_parts(second.url)) is FileAccess.GRANTED
    assert first.url.startswith(f"http://files.test/v1/files/{digest}?")
    assert first.expires == datetime(2026, 1, 1, 0, 1, tzinfo=UTC)


async def test_a_url_expires_by_the_clock(tmp_path: Path) -> None:
    stored = await _store(tmp_path).put(ToolFile(name="a", mime_type="text/plain", content=b"x"))

    later = _store(tmp_path, year=2027)

    assert later.check(*_parts(stored.url)) is FileAccess.EXPIRED


async def test_bytes_that_do_not_match_the_files_hash_are_refused(tmp_path: Path) -> None:
    recorded = ToolFile.model_validate(
        {"Name": "a", "MimeType": "text/plain", "SizeBytes": 1, "ContentHash": "0" * 64}
    )

    with pytest.raises(ValueError, match="do not match its SizeBytes/ContentHash"):
        await _store(tmp_path).put(recorded)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"url_base": "files.test"}, "url_base"),
        ({"url_base": "http://files.test?x=1"}, "url_base"),
        ({"signing_key": b"short"}, "signing_key"),
        ({"ttl_seconds": 0}, "ttl_seconds"),
    ],
)
def test_a_local_file_store_refuses_bad_settings(
    tmp_path: Path, setting: dict[str, object], message: str
) -> None:
    settings: dict[str, object] = {
        "url_base": "http://files.test",
        "signing_key": b"k" * 16,
        "clock": SteppingClock(),
        **setting,
    }

    with pytest.raises(ValueError, match=message):
        LocalFileStore(tmp_path, **settings)  # type: ignore[arg-type]


# --- the [files] table ---------------------------------------------------------------------


@pytest.mark.decision("D325")
def test_the_files_table_reads_its_key_from_the_environment(tmp_path: Path) -> None:
    config = load_service_config(write_config(tmp_path, HELLO, more=FILES), env=FILES_ENV)

    assert config.files is not None
    assert config.files.directory == tmp_path / "files"
    assert config.files.url_base == URL_BASE
    assert config.files.ttl_seconds == 600
    assert config.files.signing_key == SIGNING_KEY.encode()
    assert SIGNING_KEY not in repr(config)


@pytest.mark.decision("D325")
@pytest.mark.parametrize(
    ("files", "env", "message"),
    [
        (FILES, ENV, f"environment variable {SIGNING_ENV} is not set"),
        (FILES, {**ENV, SIGNING_ENV: "short"}, "a signing key needs 16 or more"),
        (FILES.replace('url_base = "https', 'url_base = "ftp'), FILES_ENV, "[files].url_base"),
        (FILES.replace("ttl_seconds = 600", "ttl_seconds = 0"), FILES_ENV, "[files].ttl_seconds"),
        (FILES + "colour = 1\n", FILES_ENV, "[files].colour"),
        ("[files]\ndirectory = 'f'\n", FILES_ENV, "[files].url_base"),
    ],
    ids=["unset-key", "short-key", "url-scheme", "ttl-zero", "unknown-key", "no-url-base"],
)
def test_a_bad_files_table_is_a_config_error_naming_the_key(
    tmp_path: Path, files: str, env: dict[str, str], message: str
) -> None:
    path = write_config(tmp_path, HELLO, more=files)

    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace(".", r"\.")):
        load_service_config(path, env=env)


def test_the_openapi_document_lists_the_file_route(tmp_path: Path) -> None:
    app = create_app(load_service_config(write_config(tmp_path, HELLO), env=ENV))

    document = json.loads(json.dumps(app.openapi()))

    assert "/v1/files/{content_hash}" in document["paths"]


@pytest.mark.decision("D400")
async def test_a_file_store_signs_no_url_for_a_type_or_name_no_header_can_carry(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)

    for name, mime_type in [("a.txt", "text/plain;\r\n a=b"), ("a\x00.txt", "text/plain")]:
        with pytest.raises(ValueError, match=r"MimeType|Name"):
            await store.put(ToolFile(name=name, mime_type=mime_type, content=CONTENT))

    assert list(tmp_path.rglob("*")) == []


@pytest.mark.decision("D400")
async def test_a_file_typed_with_quoted_parameters_is_served_with_that_type(
    tmp_path: Path,
) -> None:
    app, signer = _service(tmp_path)
    far = LocalFileStore(
        signer.directory,
        url_base="http://unused.test",
        signing_key=SIGNING_KEY.encode(),
        clock=SteppingClock(datetime(2100, 1, 1, tzinfo=UTC)),
    )
    mime_type = 'text/csv; header=present;\tnote="a \\"quoted\\" value"'
    stored = await far.put(ToolFile(name='the "x" file.csv', mime_type=mime_type, content=CONTENT))

    with server_thread(app) as port:
        answer = httpx.get(_on(f"http://127.0.0.1:{port}", stored.url), timeout=10)

    assert answer.status_code == 200
    assert answer.content == CONTENT
    assert answer.headers["content-type"].startswith(mime_type)
