"""The HTTP layer (FastAPI): the OpenAI-compatible routes, API-key checks, the request-body cap,
and errors as OpenAI's error objects."""

from __future__ import annotations

import contextlib
import hmac

import fastapi
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ananke_jax._src.server.openai_types import ChatCompletionRequest
from ananke_jax._src.server.service import Service
from ananke_jax._src.server.specs import RequestError

OPEN_PATHS = ("/health",)  # answered without the API key


def error_response(status: int, message: str, *, param: str | None = None, code: str | None = None) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}}, status_code=status)


def create_app(service: Service, api_key: str | None = None) -> fastapi.FastAPI:
    """The app serving ``service``; with ``api_key``, every route but ``/health`` answers 401
    without ``Authorization: Bearer <api_key>``. The service is closed when the app shuts down."""

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        yield
        service.close()

    app = fastapi.FastAPI(title="ananke-jax", lifespan=lifespan)
    app.add_middleware(_BodyLimit, limit=service.limits.max_body_bytes)

    @app.middleware("http")
    async def authorise(request: fastapi.Request, call_next):
        if api_key is not None and request.url.path not in OPEN_PATHS:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
                return error_response(401, "a valid API key is needed: send Authorization: Bearer <key>", code="invalid_api_key")
        return await call_next(request)

    @app.exception_handler(RequestError)
    async def refused(_request, e: RequestError):
        return error_response(e.status, e.message, param=e.param, code=e.code)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request, e: StarletteHTTPException):
        return error_response(e.status_code, str(e.detail))

    @app.exception_handler(RequestValidationError)
    async def malformed(_request, e: RequestValidationError):
        service.metrics.errors.labels("400").inc()
        first = e.errors()[0]
        if first.get("type") == "json_invalid":
            return error_response(400, f"the request body is not valid JSON: {first.get('ctx', {}).get('error', first.get('msg'))}")
        where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
        return error_response(400, f"{where or 'body'}: {first.get('msg', 'invalid')}", param=where or None)

    @app.get("/health")
    async def health():
        if not service.scheduler.alive:
            return error_response(503, "the engine has stopped", code="server_error")
        return {"status": "ok"}

    @app.get("/v1/models")
    async def list_models():
        model = {"id": service.model.name, "object": "model", "created": service.started, "owned_by": "ananke-jax"}
        return {"object": "list", "data": [{**model, "max_model_len": service.engine.max_len}]}

    @app.get("/metrics")
    async def metrics():
        return Response(service.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: fastapi.Request):
        completion = await service.start(body)
        if body.stream:
            return StreamingResponse(completion.stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        return await completion.whole(request.is_disconnected)

    return app


class _BodyLimit:
    """ASGI middleware: a request body over ``limit`` bytes gets 413, whether its length is
    declared or not (the body is read here, then handed on)."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers", ())).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            return await self._refuse(scope, receive, send)
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return await self.app(scope, _replay([message]), send)
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.limit:
                return await self._refuse(scope, receive, send)
        await self.app(scope, _replay([{"type": "http.request", "body": body, "more_body": False}], receive), send)

    async def _refuse(self, scope, receive, send):
        response = error_response(413, f"the request body is over the limit of {self.limit:,} bytes")
        await response(scope, receive, send)


def _replay(messages: list[dict], then=None):
    """An ASGI ``receive`` that gives ``messages``, then defers to ``then`` (the disconnect)."""

    async def receive():
        return messages.pop(0) if messages else await then()

    return receive
