"""The coverage page's JSON API over real HTTP on a real SQLite store: every answer of every
test validated against the OpenAPI document the server itself serves (a status the
document does not list for that address fails, as does a body its schema refuses), and
every address probed with every kind of request it can get (bad parameters, a bad or
unknown tag, If-None-Match, a store that is down) so the document lists exactly what each
answers; ETag and 304; 404 for unknown paths and targets, 400 naming a bad query, 503 when
the store is down; hostile stored text comes out without control characters; no secret is
ever in an answer."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from sqlalchemy import text

from releasebot.config import Settings
from releasebot.domain.targets.models import TargetState
from releasebot.store.engine import make_engine
from releasebot.store.sql import SqlStateStore
from releasebot.web.openapi import openapi_document
from releasebot.web.overview import API_PATHS
from releasebot.wiring import open_store, utc_now
from tests.support.overview import (
    BUILDING_TAG,
    COVERED_TAGS,
    FAILED_TAG,
    PageServer,
    planned_targets,
    seed_overview,
    set_state,
)
from tests.support.targets import make_target

SECRET = "hunter2-registry-password"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStateStore]:
    with open_store(f"sqlite:///{tmp_path / 'releasebot.db'}") as store:
        seed_overview(store, utc_now())
        yield store


@pytest.fixture
def page(store: SqlStateStore) -> Iterator[PageServer]:
    settings = Settings()
    settings = replace(settings, registry=replace(settings.registry, password=SECRET))
    with PageServer(store, settings) as server:
        yield server


def _validator(document: dict[str, Any], name: str) -> jsonschema.Draft202012Validator:
    resource = Resource.from_contents(document, default_specification=DRAFT202012)
    registry = Registry().with_resource("urn:openapi", resource)
    return jsonschema.Draft202012Validator(
        {"$ref": f"urn:openapi#/components/schemas/{name}"}, registry=registry
    )


DOCUMENT = openapi_document()
"""What the server serves at /api/openapi.json (``test_the_served_document_is_the_one``)."""


def _documented(path: str) -> tuple[str, dict[str, Any]] | None:
    """The document's address ``path`` falls under, and its answers; ``None``: not the API's."""
    address = path.split("?", 1)[0]
    for template, item in DOCUMENT["paths"].items():
        pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, address):
            return template, item["get"]["responses"]
    return None


def _get(page: PageServer, path: str, **headers: str) -> httpx.Response:
    """GET ``path``; an API answer whose status the document does not list for its address,
    or whose body the listed schema refuses, fails the test that asked."""
    answer = httpx.get(page.url + path, headers=headers, timeout=10)
    documented = _documented(path)
    if documented is None:  # the page and its files, or no address at all
        if path.startswith("/api"):
            assert answer.status_code == 404, (path, answer.status_code)
        return answer
    template, responses = documented
    status = str(answer.status_code)
    assert status in responses, f"{path} answered {status}, not in the document for {template}"
    content = responses[status].get("content")
    if content is None:
        assert answer.content == b"", path
    else:
        schema = content["application/json"]["schema"]
        if "$ref" in schema:
            _validator(DOCUMENT, schema["$ref"].rsplit("/", 1)[1]).validate(answer.json())
    return answer


def test_every_answer_validates_against_the_served_schema(page: PageServer) -> None:
    document = _get(page, "/api/openapi.json").json()
    assert document["openapi"].startswith("3.1")
    for schema in document["components"]["schemas"].values():
        jsonschema.Draft202012Validator.check_schema(schema)  # OpenAPI 3.1 is JSON Schema
    for path, item in document["paths"].items():
        for answer in item["get"]["responses"].values():
            for content in answer.get("content", {}).values():
                ref = content["schema"]["$ref"].rsplit("/", 1)[1]
                assert ref in document["components"]["schemas"], (path, ref)
    checks = {
        "/api/targets": "Matrix",
        "/api/targets?state=failed": "Matrix",
        f"/api/targets/{FAILED_TAG}": "Target",
        f"/api/targets/{COVERED_TAGS[0]}": "Target",
        "/api/fleet": "Fleet",
        "/api/feeds": "Feeds",
        "/api/targets?state=nonsense": "Error",
        "/api/targets/580.1-flatcar9.9.9": "Error",
    }
    for path, schema in checks.items():
        answer = _get(page, path)
        _validator(document, schema).validate(answer.json())
    # the schema is closed: an extra field fails validation, so the test can fail
    extra = _get(page, "/api/fleet").json() | {"surprise": 1}
    with pytest.raises(jsonschema.ValidationError):
        _validator(document, "Fleet").validate(extra)


def test_the_served_document_is_the_one_and_names_every_address(page: PageServer) -> None:
    assert _get(page, "/api/openapi.json").json() == json.loads(json.dumps(DOCUMENT))
    assert set(DOCUMENT["paths"]) == set(API_PATHS)


def _probes(template: str) -> list[tuple[str, dict[str, str]]]:
    """Every kind of request an address can get, as (path, headers)."""
    path = template.replace("{tag}", FAILED_TAG)
    probes = [
        (path, {}),
        (path + "?surprise=1", {}),
        (path + "?state=failed&state=failed", {}),
        (path + "?" + "a" * 600, {}),
        (path + "?%zz", {}),
    ]
    if "{tag}" in template:
        probes += [
            (template.replace("{tag}", "%0a%1b"), {}),
            (template.replace("{tag}", "595.1.1-flatcar1.2.3"), {}),
        ]
    else:
        probes += [(path + "?state=bogus", {}), (path + "?flatcar=latest&driver=x", {})]
    return probes


def test_every_status_each_address_answers_is_documented(page: PageServer) -> None:
    """Every address, asked everything it can be asked, on a working store and on one that
    is down: each answer's status is in the document (``_get`` fails otherwise), and each
    status the document lists is one the address really answers."""
    down_engine = make_engine("postgresql+psycopg://releasebot@127.0.0.1:9/none")
    try:
        with PageServer(SqlStateStore(down_engine)) as down:
            for template, item in DOCUMENT["paths"].items():
                seen = set()
                for path, headers in _probes(template):
                    for server in (page, down):
                        answer = _get(server, path, **headers)
                        seen.add(str(answer.status_code))
                        if etag := answer.headers.get("ETag"):
                            again = _get(server, path, **{"If-None-Match": etag})
                            seen.add(str(again.status_code))
                assert seen == set(item["get"]["responses"]), template
    finally:
        down_engine.dispose()


def test_the_matrix_has_the_seeded_states(page: PageServer) -> None:
    matrix = _get(page, "/api/targets").json()
    assert matrix["drivers"] == ["580.178.04", "570.195.03"]
    rows = {row["flatcar_version"]: row for row in matrix["rows"]}
    assert [cell["state"] for cell in rows["4593.2.5"]["cells"]] == ["published", "published"]
    assert [cell["state"] for cell in rows["4593.2.4"]["cells"]] == ["failed", "building"]
    assert rows["4593.2.5"]["nodes_running"] == 2
    assert rows["4593.2.5"]["channel"] == "stable"
    assert rows["4593.2.5"]["cells"][0]["published_after_seconds"] > 0
    only_failed = _get(page, "/api/targets?state=failed").json()
    assert [r["flatcar_version"] for r in only_failed["rows"]] == ["4593.2.4"]
    assert only_failed["rows"][0]["cells"][1] is None


def test_the_banner_follows_the_store(page: PageServer, store: SqlStateStore) -> None:
    fleet = _get(page, "/api/fleet").json()
    assert fleet["banner"] == {
        "covered": True,
        "text": "2 GPU nodes on 1 Flatcar version: all covered",
        "uncovered": [],
        "uncovered_nodes": 0,
        "help": None,
    }
    assert fleet["ignored"][0]["name"] == "gpu-u"
    set_state(store, COVERED_TAGS[0], TargetState.MISSING)
    banner = _get(page, "/api/fleet").json()["banner"]
    assert not banner["covered"]
    assert banner["uncovered"][0]["nodes"] == ["gpu-a", "gpu-b"]
    assert banner["uncovered"][0]["verdict"] == "missing"
    assert banner["uncovered"][0]["tags"][0]["tag"] == COVERED_TAGS[0]
    assert f"2 nodes run 4593.2.5 without {COVERED_TAGS[0]} (missing) since" in banner["text"]
    # the channel policy's other driver failing on the same version is not the nodes' image
    set_state(store, COVERED_TAGS[0], TargetState.PUBLISHED)
    set_state(store, COVERED_TAGS[1], TargetState.FAILED)
    assert _get(page, "/api/fleet").json()["banner"]["covered"] is True


def test_etag_and_not_modified(page: PageServer, store: SqlStateStore) -> None:
    for path in ("/", "/static/app.js", "/api/targets", "/api/fleet", "/api/feeds"):
        first = _get(page, path)
        assert first.status_code == 200, path
        etag = first.headers["ETag"]
        again = _get(page, path, **{"If-None-Match": etag})
        assert again.status_code == 304, path
        assert again.content == b""
        assert again.headers["ETag"] == etag, path
    for template, item in DOCUMENT["paths"].items():  # the document says how to ask
        names = [parameter["name"] for parameter in item["get"].get("parameters", ())]
        assert "If-None-Match" in names, template
        assert "ETag" in item["get"]["responses"]["304"]["headers"], template
    etag = _get(page, "/api/targets").headers["ETag"]
    set_state(store, BUILDING_TAG, TargetState.PUBLISHED)
    changed = _get(page, "/api/targets", **{"If-None-Match": etag})
    assert changed.status_code == 200
    assert changed.headers["ETag"] != etag


@pytest.mark.parametrize(
    ("path", "status", "says"),
    [
        ("/nope", 404, "not found"),
        ("/api/nope", 404, "not found"),
        ("/api/targets/595.1.1-flatcar1.2.3", 404, "no target"),
        ("/api/targets?state=bogus", 400, "state 'bogus' is not one of"),
        ("/api/targets?colour=red", 400, "unknown parameter 'colour'"),
        ("/api/targets?flatcar=latest", 400, "flatcar 'latest' is not a flatcar version"),
        ("/api/targets?state=failed&state=missing", 400, "given 2 times"),
        ("/api/targets/%0a%1b", 400, "is not an image tag"),
        ("/api/fleet?x=1", 400, "takes no query parameters"),
        ("/api/targets?" + "a" * 600, 400, "longer than"),
        ("/?colour=red", 400, "unknown parameter 'colour'"),
    ],
)
def test_bad_requests_get_one_line(page: PageServer, path: str, status: int, says: str) -> None:
    answer = _get(page, path)
    assert answer.status_code == status
    if path.startswith(("/api", "/?")):
        assert says in answer.json()["error"]
        assert "\n" not in answer.json()["error"]
        assert "Traceback" not in answer.text
    else:
        assert says in answer.text


def test_the_page_takes_its_filter_in_its_address(page: PageServer) -> None:
    answer = _get(page, "/?state=failed&q=4593.2&flatcar=4593.2.4&driver=580.178.04")
    assert answer.status_code == 200
    assert "<title>releasebot" in answer.text


def test_the_matrix_tells_published_from_found_in_the_registry(
    page: PageServer, store: SqlStateStore
) -> None:
    now = utc_now()
    found = make_target(driver="575.64.05", flatcar="4593.2.5")
    records = {r.tag: r for r in store.sync_targets(planned_targets(found), now)}
    store.save(targets=[replace(records[found.tag], state=TargetState.PUBLISHED, published_at=now)])
    cells = {
        cell["tag"]: cell
        for row in _get(page, "/api/targets").json()["rows"]
        for cell in row["cells"]
        if cell
    }
    assert cells[found.tag]["found_in_registry"] is True
    assert cells[found.tag]["published_after_seconds"] is None  # not "after 146 days"
    assert cells[COVERED_TAGS[0]]["found_in_registry"] is False
    assert cells[COVERED_TAGS[0]]["published_after_seconds"] > 0
    assert _get(page, f"/api/targets/{found.tag}").json()["found_in_registry"] is True


def test_hostile_stored_text_loses_its_control_characters(page: PageServer) -> None:
    detail = _get(page, f"/api/targets/{FAILED_TAG}").json()
    feeds = _get(page, "/api/feeds").json()["feeds"]
    error = next(feed for feed in feeds if feed["name"] == "nvidia")["last_error"]
    for value in (detail["last_error"], detail["builds"][0]["jobs"][0]["log_tail"], error):
        assert "\x1b" not in value
        assert "<script>" in value  # kept as text; the page never parses it as markup
    assert detail["builds"][0]["jobs"][0]["log_tail"].startswith("make: *** [modules] Error 2\n")
    assert _get(page, "/").headers["Content-Security-Policy"].startswith("default-src 'self'")


def test_no_secret_in_any_answer(page: PageServer, store: SqlStateStore) -> None:
    """Stored text from registries, API servers and builds may quote a credential: every
    answer masks the configured secrets by value and every credential form by its shape."""
    now = utc_now()
    leaks = (
        f"push to https://robot:{SECRET}@registry.example.com refused",
        "GET https://feeds.example/nvidia.json?token=tok-abc123&x=1: 500",
        "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig-xyz",
    )
    store.record_feed_failure("nvidia", "https://example.test/nvidia.json", leaks[1], now)
    record = store.target(COVERED_TAGS[0])
    assert record is not None
    store.save(targets=[replace(record, last_error=" / ".join(leaks))])
    for path in (
        "/",
        "/api/targets",
        f"/api/targets/{COVERED_TAGS[0]}",
        "/api/fleet",
        "/api/feeds",
        "/api/openapi.json",
    ):
        text = _get(page, path).text
        for secret in (SECRET, "tok-abc123", "sig-xyz", "e30"):
            assert secret not in text, (path, secret)
    detail = _get(page, f"/api/targets/{COVERED_TAGS[0]}").json()
    assert "registry.example.com refused" in detail["last_error"]  # masked, not dropped
    assert detail["pull"] == "registry.example.com/nvidia/driver@sha256:" + "ab" * 32


def test_a_store_that_is_down_answers_503_and_the_page_still_loads(tmp_path: Path) -> None:
    # PostgreSQL on a port nobody listens on: every read fails to connect
    engine = make_engine("postgresql+psycopg://releasebot@127.0.0.1:9/none")
    try:
        with PageServer(SqlStateStore(engine)) as page:
            for path in ("/api/targets", "/api/fleet", "/api/feeds", f"/api/targets/{FAILED_TAG}"):
                answer = _get(page, path)
                assert answer.status_code == 503, path
                body = answer.json()
                assert body["error"].startswith("the state store"), body
                assert "Traceback" not in answer.text
            assert _get(page, "/").status_code == 200
    finally:
        engine.dispose()


def test_an_unreadable_row_is_not_called_unreachable(
    page: PageServer, store: SqlStateStore, tmp_path: Path
) -> None:
    """A row releasebot cannot decode is a problem to fix, not "try later": 503 with its own
    line, the row named in the log only."""
    engine = make_engine(f"sqlite:///{tmp_path / 'releasebot.db'}")
    try:
        with engine.begin() as connection:
            connection.execute(
                text("UPDATE targets SET state = 'exploded' WHERE tag = :tag"), {"tag": FAILED_TAG}
            )
    finally:
        engine.dispose()
    for path in ("/api/targets", "/api/fleet"):
        answer = _get(page, path)
        assert answer.status_code == 503, path
        assert answer.json()["error"].startswith("the state store answered with something")
        assert "exploded" not in answer.text
        assert "Traceback" not in answer.text
    assert _get(page, "/api/feeds").status_code == 200  # what can be read still is


def test_head_answers_without_a_body(page: PageServer) -> None:
    answer = httpx.head(page.url + "/api/fleet", timeout=10)
    assert answer.status_code == 200
    assert answer.content == b""
    assert int(answer.headers["Content-Length"]) > 0
    assert json.loads(_get(page, "/api/fleet").text)["gpu_nodes"] == 2
