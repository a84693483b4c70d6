"""The current user and tags of a unit of work (a web request, a job), held in context variables.

What is set here is added to every event captured in the same context: by
:class:`~eventlog_handler.EventLogHandler`, by the structlog processor and by the exception
hooks. Because the values live in :mod:`contextvars`, they follow the code that runs in the
context: every asyncio task gets a copy of the context it was created in, and a thread started
through ``contextvars.copy_context().run`` sees the values of its starter. A thread started
plainly begins with no user, so one request's user never leaks into another's events.

Per request::

    from eventlog_handler import user_context

    def handle(request):
        with user_context(request.user.id, name=request.user.email):
            ...  # every event captured here carries "@user": {"identity": ..., "name": ...}

Or without a ``with`` block (for middleware that has a "before" and an "after" step)::

    scope = set_user("u-42", name="Ann")
    try:
        ...
    finally:
        scope.reset()

One record can carry a different user with ``extra={"@user": {"identity": "u-7", "name": "Bob"}}``
(or ``extra={"@user": "u-7"}`` for an identity alone); see :mod:`eventlog_handler.capture._records`.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Generic, TypeVar

from eventlog_handler.capture import _tracelog as tracelog
from eventlog_handler.capture._admit import reference_of
from eventlog_handler.delivery._stderr import say_once
from eventlog_handler.wire._dates import quote_reference
from eventlog_handler.wire._events import normalize_tags, user_info

_T = TypeVar("_T")

_USER: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "eventlog_handler_user", default=None
)
_TAGS: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "eventlog_handler_tags", default=()
)


class Scope(Generic[_T]):
    """A change of a context value, undone by :meth:`reset` or by leaving a ``with`` block.

    Returned by :func:`set_user` and :func:`add_tags`. Resetting restores the value that was
    current before the change; it must happen in the same context the change was made in (as
    with :meth:`contextvars.ContextVar.reset`). Resetting twice does nothing.
    """

    __slots__ = ("_token", "_var", "value")

    def __init__(self, var: contextvars.ContextVar[_T], value: _T) -> None:
        self._var = var
        self.value = value
        self._token: contextvars.Token[_T] | None = var.set(value)

    def reset(self) -> None:
        """Restore the value current before this change."""
        token, self._token = self._token, None
        if token is not None:
            self._var.reset(token)
            if self._var is _USER:  # the end of user_context(): the session follows back
                _tell_listener(_USER.get())

    def __enter__(self) -> Scope[_T]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.reset()

    def __repr__(self) -> str:
        state = "active" if self._token is not None else "reset"
        return f"<Scope {self._var.name}={self.value!r} ({state})>"


#: Told of the user set outside a web request (the process's user): the session follows it
#: (set by ``setup(sessions=True)``). Called on the caller's thread; must never raise.
user_listener: Callable[[dict[str, Any] | None], None] | None = None


def set_user(
    identity: Any, name: Any = None, data: Mapping[str, Any] | None = None
) -> Scope[dict[str, Any] | None]:
    """Make ``identity`` (and ``name``, ``data``) the user of events captured in this context.

    Events get ``"@user": {"identity": ..., "name": ..., "data": {...}}``; the service opens a
    session per identity. ``identity`` and ``name`` are turned into strings; ``data`` is made
    JSON-safe now, so later changes to it are not seen. Passing ``None`` for both identity and
    name clears the user.

    Returns a :class:`Scope`: call ``.reset()`` (or use it in a ``with`` block) to restore the
    previous user. Without a reset, the user stays set for the rest of the context (for a thread
    or task, until it ends).
    """
    user = _user(identity, name, data)
    _tell_listener(user)
    _SINCE.set((True, _SINCE.get()[1]))
    return Scope(_USER, user)


def _user(identity: Any, name: Any, data: Any) -> dict[str, Any] | None:
    """The ``@user`` object; ``data`` that is not a mapping (or can't be read as one) is left
    out and said once: setting the user never raises (it sits in a request's hook)."""
    if data is not None and not isinstance(data, Mapping):
        say_once(
            "set_user data",
            f"eventlog_handler: set_user()'s data must be a mapping (a dict), got a "
            f"{type(data).__name__}; the user is set without it",
        )
        data = None
    try:
        return user_info(identity, name, data)
    except Exception as exc:  # a mapping whose items raise
        say_once(
            "set_user data",
            f"eventlog_handler: set_user()'s data could not be read ({type(exc).__name__}); "
            "the user is set without it",
        )
        return user_info(identity, name)


def _tell_listener(user: dict[str, Any] | None) -> None:
    """Tell :data:`user_listener` of the user now set, outside a web request."""
    listener = user_listener
    if listener is not None and _REQUEST.get() is None:
        with contextlib.suppress(Exception):  # setting the user never raises
            listener(user)


@contextmanager
def user_context(
    identity: Any, name: Any = None, data: Mapping[str, Any] | None = None
) -> Iterator[dict[str, Any] | None]:
    """``with user_context("u-42", name="Ann"): ...`` — :func:`set_user` for one block.

    Yields the ``@user`` object (``None`` when identity and name are both ``None``).
    """
    scope = set_user(identity, name, data)
    try:
        yield scope.value
    finally:
        scope.reset()


def clear_user() -> Scope[dict[str, Any] | None]:
    """Events captured in this context carry no user (until reset)."""
    _tell_listener(None)
    _SINCE.set((True, _SINCE.get()[1]))
    return Scope(_USER, None)


def get_user() -> dict[str, Any] | None:
    """The ``@user`` object of this context, or ``None``."""
    return _USER.get()


def add_tags(*tags: str | Iterable[str]) -> Scope[tuple[str, ...]]:
    """Add tags to every event captured in this context (on top of the tags already set).

    ``add_tags("checkout", "beta")`` or ``add_tags(["checkout", "beta"])``. Returns a
    :class:`Scope` whose ``reset()`` (or the end of a ``with`` block) removes them again.
    """
    flat: list[str] = []
    tag: Any  # what a caller passes is not always what the signature says
    for tag in tags:
        if isinstance(tag, str):
            flat.append(tag)
            continue
        try:  # setting tags never raises (it sits in a request's hook)
            items = None if tag is None or isinstance(tag, (bytes, bytearray)) else list(tag)
        except Exception:  # not iterable
            items = None
        for item in [tag] if items is None else items:
            if items is None or item is None or isinstance(item, _NOT_TAGS):
                say_once(
                    "add_tags",
                    "eventlog_handler: add_tags() takes strings, or lists of strings; a "
                    f"{type(item).__name__} was left out",
                )
            else:
                flat.append(item)
    user_set, added = _SINCE.get()
    _SINCE.set((user_set, tuple(normalize_tags((*flat, *added)))))  # the newest 50
    return Scope(_TAGS, tuple(normalize_tags((*_TAGS.get(), *flat))))


#: Values that are no tag in a list of tags (a number in one is written out).
_NOT_TAGS = (bytes, bytearray, list, tuple, set, frozenset, dict)


def get_tags() -> tuple[str, ...]:
    """The tags of this context."""
    return _TAGS.get()


#: Whether a user was set, and which tags were added, in this context since a request scope
#: of the web middlewares last ended in it: what code around the middleware set for the
#: request to come, told from what it set for an earlier one on the same server thread.
_SINCE: contextvars.ContextVar[tuple[bool, tuple[str, ...]]] = contextvars.ContextVar(
    "eventlog_handler_since", default=(True, ())
)


# -- the request of a unit of work ---------------------------------------------------------

_REQUEST: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "eventlog_handler_request", default=None
)


def get_request() -> dict[str, Any] | None:
    """The ``@request`` object of this context (set by the web middleware), or ``None``."""
    return _REQUEST.get()


#: Whether the unit of work's not-found event was queued: a list shared by every context
#: copied from the request's (a handler run in a thread pool, an ASGI middleware's task), so
#: the middleware's 404 is not sent after the application's own ``submit_not_found``.
_NOT_FOUND: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar(
    "eventlog_handler_not_found", default=None
)


def not_found_sent() -> bool:
    """Whether this unit of work's not-found event was queued already."""
    return bool(_NOT_FOUND.get())


def note_not_found_sent() -> None:
    """This unit of work's not-found event was queued (nothing outside one)."""
    sent = _NOT_FOUND.get()
    if sent is not None and not sent:
        sent.append(True)


#: The reference id of the last error event captured in this context.
_LAST_REFERENCE: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "eventlog_handler_last_reference", default=None
)


def last_reference_id() -> str | None:
    """The reference id of the last error event captured in this context (thread, asyncio
    task, web request), ``None`` before any: what an app's error page can show, and what
    :func:`~eventlog_handler.submit_user_description` takes. Its event is then sent as it is,
    never counted into a roll-up of identical ones (a user may quote the id).

    While an exception that was reported is being handled, the id of its event, unless an
    error was captured after it in this context: also outside the request's context
    (Starlette's ``ServerErrorMiddleware`` calls an ``exception_handler(Exception)`` outside
    the middleware that reported it, where the context's id may be an earlier one's)."""
    reference_id = _LAST_REFERENCE.get()
    handled = reference_of(sys.exc_info()[1])
    if handled is not None and (reference_id is None or not _later(reference_id, handled)):
        reference_id = handled  # unless a later error was captured in this context since
    if reference_id is not None:
        quote_reference(reference_id)
    return reference_id


def _later(first: str, second: str) -> bool:
    """Whether reference id ``first`` was made after ``second`` by this process (one prefix,
    a counter after it)."""
    head, _, count = first.rpartition("-")
    other_head, _, other = second.rpartition("-")
    try:
        return head == other_head and int(count, 16) > int(other, 16)
    except ValueError:
        return False


def note_reference(reference_id: Any) -> None:
    """An error event with this reference id was captured in this context."""
    if isinstance(reference_id, str):
        _LAST_REFERENCE.set(reference_id)


class RequestScope:
    """One unit of work (a web request, a job): a fresh user, no tags, its ``@request``, and no
    last reference id (:func:`last_reference_id`) from an earlier unit.

    Entering it clears the user and tags of the surrounding context, so a thread or task that
    serves one request after another never carries one request's user into the next; leaving
    it (or :meth:`close`) restores what was there before. ``request`` (a JSON-ready ``@request``
    object, or ``None``) is added to error events captured inside. Use it as a ``with`` block,
    or call :meth:`close` in the same context it was made in.

    With ``keep_outer=True`` (the web middlewares) the user and tags that code around it set
    for this request (an outer middleware, an auth wrapper) are kept instead: those set since
    the previous such scope ended in this context (a server thread's previous request), not
    what that code set for an earlier request and left there. When the scope ends, that code
    has them back (its own lines after the response carry them). Inside a scope still open
    (one that was never closed, or a second middleware in the same request) they are cleared
    as before.
    """

    __slots__ = ("_keep_outer", "_scopes", "_trace")

    def __init__(self, request: dict[str, Any] | None = None, *, keep_outer: bool = False) -> None:
        user: dict[str, Any] | None = None
        tags: tuple[str, ...] = ()
        self._keep_outer = keep_outer
        if keep_outer and _REQUEST.get() is None:  # not in an earlier request's open scope
            user_set, added = _SINCE.get()
            user = _USER.get() if user_set else None
            tags = tuple(tag for tag in _TAGS.get() if tag in added)
        self._scopes: list[Scope[Any]] = [
            Scope(_USER, user),
            Scope(_TAGS, tags),
            Scope(_REQUEST, request),
            Scope(_LAST_REFERENCE, None),
            Scope(_NOT_FOUND, []),
        ]
        self._trace: Any = tracelog.new_scope_ring()  # the request's own trace log

    def close(self) -> None:
        """Restore the user, tags and request that were current before the scope began."""
        scopes, self._scopes = self._scopes, []
        trace, self._trace = self._trace, None
        for scope in reversed(scopes):
            with contextlib.suppress(ValueError):  # reset from another context: leave it alone
                scope.reset()
        if self._keep_outer and scopes:  # what is set from now on is for the next request
            _SINCE.set((False, ()))
        if trace is not None:
            with contextlib.suppress(ValueError):
                tracelog.reset_scope_ring(trace)

    def __enter__(self) -> RequestScope:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def request_scope(request: dict[str, Any] | None = None) -> RequestScope:
    """``with request_scope(info): ...`` — see :class:`RequestScope`."""
    return RequestScope(request)
