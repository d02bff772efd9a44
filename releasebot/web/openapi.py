"""The OpenAPI 3.1 document of the coverage page's JSON API (``/api/openapi.json``).

Written by hand next to the answers it describes (``domain/views/overview*.py`` build them); the
tests validate real answers against the document as served, with every object closed
(``additionalProperties: false``), so a field added on one side only fails a test.
"""

from __future__ import annotations

from typing import Any

from releasebot import __version__
from releasebot.domain.fleet.coverage import Verdict
from releasebot.domain.targets.models import REASON_ORDER, TargetState

_TIME = {"type": ["string", "null"], "format": "date-time"}
_TEXT = {"type": ["string", "null"]}
_STATES = [state.value for state in TargetState]
_VERDICTS = [verdict.value for verdict in Verdict]


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": sorted(properties),
        "properties": properties,
    }


def _list(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


_STRINGS = _list({"type": "string"})
_REASONS = {
    **_list({"enum": [reason.value for reason in REASON_ORDER]}),
    "description": "why the target must exist, strongest first (none: asked for by hand)",
}
_FOUND = {
    "type": "boolean",
    "description": "published, but no build of releasebot's published it: the tag was "
    "already in the registry when releasebot first saw it",
}
_SECONDS = {"type": ["integer", "null"], "minimum": 0}
_CELL = _object(
    {
        "tag": {"type": "string"},
        "state": {"enum": _STATES},
        "words": {"type": "string", "description": "the state in words"},
        "attempts": {"type": "integer", "minimum": 0},
        "reasons": _REASONS,
        "published_after_seconds": {
            "type": ["integer", "null"],
            "description": "from the Flatcar release to the image's publication by "
            "releasebot's build; null when not published, or found in the registry",
        },
        "found_in_registry": _FOUND,
    }
)
_ROW = _object(
    {
        "flatcar_version": {"type": "string"},
        "channel": _TEXT,
        "released_at": _TIME,
        "known": {"type": "boolean", "description": "a Flatcar feed lists the version"},
        "nodes_running": {"type": "integer", "minimum": 0},
        "nodes_pending": {"type": "integer", "minimum": 0},
        "cells": _list({"oneOf": [{"$ref": "#/components/schemas/Cell"}, {"type": "null"}]}),
    }
)
_MATRIX = _object(
    {
        "drivers": _STRINGS,
        "rows": _list({"$ref": "#/components/schemas/Row"}),
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
    }
)
_JOB = _object(
    {
        "job_name": _TEXT,
        "arch": {"type": "string"},
        "state": {"type": "string"},
        "reason": _TEXT,
        "message": _TEXT,
        "log_tail": _TEXT,
        "digest": _TEXT,
        "created_at": _TIME,
        "finished_at": _TIME,
    }
)
_DETAIL = _object(
    {
        "tag": {"type": "string"},
        "driver_version": {"type": "string"},
        "driver_branch": _TEXT,
        "flatcar_version": {"type": "string"},
        "flatcar_channel": _TEXT,
        "kernel": _TEXT,
        "arches": _STRINGS,
        "reasons": _REASONS,
        "required": {"type": "boolean"},
        "state": {"enum": _STATES},
        "words": {"type": "string"},
        "attempts": {"type": "integer", "minimum": 0},
        "next_attempt_at": _TIME,
        "last_error": _TEXT,
        "first_planned_at": _TIME,
        "updated_at": _TIME,
        "released_at": _TIME,
        "published_at": _TIME,
        "proven_at": {**_TIME, "description": "when a GPU node first proved the image"},
        "proven_node": _TEXT,
        "found_in_registry": _FOUND,
        "digest": _TEXT,
        "pull": {"type": "string", "description": "repository@digest, else repository:tag"},
        "slack": {"type": ["string", "null"], "format": "uri"},
        "signed": {"type": "boolean"},
        "key_fingerprint": _TEXT,
        "builds": _list(
            _object(
                {
                    "attempt": {"type": "integer", "minimum": 0},
                    "started_at": {**_TIME, "description": "when its first Job was created"},
                    "finished_at": {**_TIME, "description": "when its last Job ended"},
                    "duration_seconds": {**_SECONDS, "description": "null while running"},
                    "jobs": _list({"$ref": "#/components/schemas/Job"}),
                }
            )
        ),
    }
)
_UNCOVERED = _object(
    {
        "flatcar_version": {"type": "string"},
        "pending": {"type": "boolean", "description": "nodes will reboot into it"},
        "verdict": {"enum": _VERDICTS},
        "nodes": _list(_TEXT),
        "since": _TIME,
        "tags": _list(
            _object(
                {
                    "tag": {"type": "string"},
                    "state": {"enum": _STATES},
                    "words": {"type": "string"},
                    "action": {"type": "string", "description": "what to do about it"},
                }
            )
        ),
    }
)
_NODE = _object(
    {
        "name": _TEXT,
        "arch": _TEXT,
        "flatcar_version": _TEXT,
        "kernel": _TEXT,
        "verdict": {"enum": _VERDICTS},
        "pending_version": _TEXT,
        "pending_verdict": {"enum": [*_VERDICTS, None]},
        "tags": _STRINGS,
        "pending_tags": _STRINGS,
        "first_seen_at": _TIME,
        "last_seen_at": _TIME,
        "gate": {
            "oneOf": [
                {"type": "null"},
                _object({"ready": {"type": "boolean"}, "text": {"type": "string"}}),
            ]
        },
    }
)
_FLEET = _object(
    {
        "banner": _object(
            {
                "covered": {"type": "boolean"},
                "text": {"type": "string"},
                "uncovered": _list({"$ref": "#/components/schemas/Uncovered"}),
                "uncovered_nodes": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "GPU nodes whose own image (or next one) is not there",
                },
                "help": {**_TEXT, "description": "where the person on call reads what to do"},
            }
        ),
        "gpu_nodes": {"type": "integer", "minimum": 0},
        "flatcar_versions": {"type": "integer", "minimum": 0},
        "gate": {"type": "boolean", "description": "the reboot gate is on"},
        "nodes": _list({"$ref": "#/components/schemas/Node"}),
        "ignored": _list(_object({"name": _TEXT, "reason": _TEXT})),
    }
)
_FEED = _object(
    {
        "name": _TEXT,
        "url": _TEXT,
        "last_polled_at": _TIME,
        "last_success_at": _TIME,
        "last_changed_at": _TIME,
        "last_error": _TEXT,
        "last_error_at": _TIME,
        "consecutive_failures": {"type": "integer", "minimum": 0},
        "healthy": {"type": "boolean"},
    }
)
_ERROR = _object({"error": {"type": "string"}})


_ANSWERS = {
    400: "a query the address does not take (an unknown or repeated parameter, a bad value, "
    "any query where none is taken); the error names it",
    404: "no such target",
    503: "the state store cannot answer",
}


_ETAG = {
    "description": "the answer's validator (a hash of its body): send it back in If-None-Match",
    "schema": {"type": "string"},
}
_IF_NONE_MATCH = {
    "name": "If-None-Match",
    "in": "header",
    "required": False,
    "description": "the ETag of the answer the client has (or several, comma-separated, or "
    "*): 304 with no body when it is still the answer. Checked against the store's change "
    "counters before any work, so asking every few seconds costs one small read.",
    "schema": {"type": "string"},
}


def _answers(schema: str, *statuses: int) -> dict[str, Any]:
    """200 (with its ETag) and 304, which every address answers, and ``statuses``."""
    content = {"$ref": f"#/components/schemas/{schema}"}
    answers: dict[str, Any] = {
        "200": {
            "description": "the answer; ETag set",
            "headers": {"ETag": _ETAG},
            "content": {"application/json": {"schema": content}},
        },
        "304": {
            "description": "unchanged since the ETag given in If-None-Match; no body",
            "headers": {"ETag": _ETAG},
        },
    }
    for status in statuses:
        answers[str(status)] = _error(_ANSWERS[status])
    return answers


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


def _query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


def openapi_document() -> dict[str, Any]:
    """The document as served."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "releasebot coverage API",
            "version": __version__,
            "description": "Read-only: which driver images exist for which Flatcar "
            "versions, which GPU nodes are covered, how the feeds are doing.",
        },
        "paths": {
            "/api/targets": {
                "get": {
                    "summary": "the driver x Flatcar matrix of required targets",
                    "parameters": [
                        _query("state", "only cells in this state", {"enum": _STATES}),
                        _query("flatcar", "only this Flatcar version's row", {"type": "string"}),
                        _query("driver", "only this driver's column", {"type": "string"}),
                        _IF_NONE_MATCH,
                    ],
                    "responses": _answers("Matrix", 400, 503),
                }
            },
            "/api/targets/{tag}": {
                "get": {
                    "summary": "one target: attempts, Jobs, log tails, digest, signature",
                    "parameters": [
                        {
                            "name": "tag",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                        },
                        _IF_NONE_MATCH,
                    ],
                    "responses": _answers("Target", 400, 404, 503),
                }
            },
            "/api/fleet": {
                "get": {
                    "summary": "the banner and every GPU node's verdict",
                    "parameters": [_IF_NONE_MATCH],
                    "responses": _answers("Fleet", 400, 503),
                }
            },
            "/api/feeds": {
                "get": {
                    "summary": "feed health",
                    "parameters": [_IF_NONE_MATCH],
                    "responses": _answers("Feeds", 400, 503),
                }
            },
            "/api/openapi.json": {
                "get": {
                    "summary": "this document",
                    "parameters": [_IF_NONE_MATCH],
                    "responses": _answers("Document", 400),
                }
            },
        },
        "components": {
            "schemas": {
                "Cell": _CELL,
                "Row": _ROW,
                "Matrix": _MATRIX,
                "Job": _JOB,
                "Target": _DETAIL,
                "Uncovered": _UNCOVERED,
                "Node": _NODE,
                "Fleet": _FLEET,
                "Feeds": _object({"feeds": _list(_FEED)}),
                "Error": _ERROR,
                "Document": {"type": "object", "description": "an OpenAPI 3.1 document"},
            }
        },
    }
