"""Live fetched results: a Python mirror of ``NSFetchedResultsController`` (DESIGN.md §7).

:class:`FetchedResults` subscribes with ``results/subscribe`` and keeps a local,
sectioned copy of the results up to date by applying each ``results/didChange``
by the contract's rule:

1. remove deleted and moved objects, by descending old index path;
2. remove deleted sections, descending;
3. insert inserted sections (empty), ascending;
4. insert inserted and moved objects, by ascending new index path;
5. replace the values of moved and updated objects (and store inserted ones).

A gap in ``seq``, a ``results/didInvalidate``, or a delta that does not fit
the local copy (an id not where the delta says) makes it resync from
``results/snapshot`` and ``results/objects``. On a new session,
:meth:`FetchedResults.resume_subscription` subscribes again with ``resume``, so
the daemon sends only the rows that changed since (DESIGN.md §7, Resuming).

:class:`ResultsState` is the pure part (no I/O): one immutable snapshot of the
results and :meth:`ResultsState.applying` to derive the next.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple, Union

from .errors import DepotError

__all__ = ["FetchedResults", "FetchedResultsDelegate", "ResultsState", "Section", "InconsistentDelta", "index_title",
           "ResultsClient", "PendingResult", "format_table", "results_digest"]

IndexPath = Tuple[int, int]
ChangeCallback = Callable[["FetchedResults", Optional[Dict[str, Any]]], None]


class PendingResult(Protocol):
    """A request on its way (what :meth:`ResultsClient.request` returns)."""

    def result(self, timeout: Optional[float] = None) -> Any:
        """Waits for the result, or raises the daemon's error."""
        ...


class ResultsClient(Protocol):
    """What :class:`FetchedResults` needs of a client: requests and notifications.

    :class:`depot.Client` is one; so is anything with these three methods.
    """

    def request(self, method: str, params: Optional[Mapping[str, Any]] = None, *,
                request_id: Union[int, str, None] = None,
                on_response: Optional[Callable[[Optional[Any], Optional[DepotError]], None]] = None
                ) -> PendingResult:
        """Sends a request; ``on_response`` is called on the dispatch thread with ``(result, error)``."""
        ...

    def call(self, method: str, params: Optional[Mapping[str, Any]] = None, *,
             timeout: Optional[float] = None) -> Any:
        """Calls ``method`` and returns its result."""
        ...

    def on_notification(self, method: str, callback: Callable[[str, Any], None]) -> Callable[[], None]:
        """Calls ``callback(method, params)`` for each notification; returns a remover."""
        ...


class InconsistentDelta(Exception):
    """A ``results/didChange`` does not fit the local results; the mirror resyncs."""


def _cell(value: Any, max_width: int) -> str:
    if value is None:
        text = ""
    elif isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, sort_keys=True)
    return text if len(text) <= max_width else text[:max_width - 1] + "…"


def format_table(sections: Sequence[Tuple[str, Sequence[Any]]], keys: Optional[Sequence[str]] = None, *,
                 sectioned: bool = True, max_width: int = 40) -> str:
    """Formats ``[(section name, [objects])]`` as a text table with aligned columns.

    Columns are ``id`` and ``keys`` (by default every value key, in first-seen order; ``entity``
    and ``version`` left out). Section names are printed as ``== name ==`` lines when ``sectioned``.
    """
    objects = [o for _, objs in sections for o in objs if isinstance(o, Mapping)]
    if keys is None:
        seen: Dict[str, None] = {}
        for o in objects:
            for k in o:
                if k not in ("id", "entity", "version"):
                    seen.setdefault(k, None)
        keys = list(seen)
    columns = ["id", *keys]
    rows: List[Union[str, List[str]]] = []
    for name, objs in sections:
        if sectioned:
            rows.append(f"== {name} ==")
        for o in objs:
            values = o if isinstance(o, Mapping) else {"id": o}
            rows.append([_cell(values.get(c), max_width) for c in columns])
    widths = [len(c) for c in columns]
    for row in rows:
        if isinstance(row, list):
            widths = [max(w, len(v)) for w, v in zip(widths, row)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(cells, widths)).rstrip()

    out = [line(columns), line(["-" * w for w in widths])]
    out += [row if isinstance(row, str) else line(row) for row in rows]
    return "\n".join(out)


def index_title(name: str) -> str:
    """A section's index title: its name's capitalised first letter (``""`` for ``""``)."""
    return name[:1].upper()


def results_digest(ids: Sequence[str]) -> str:
    """The digest of an ordered id list (DESIGN.md §7, Resuming): lowercase hex SHA-256 of the ids'
    UTF-8 bytes joined by ``"\\n"``."""
    return hashlib.sha256("\n".join(ids).encode("utf-8")).hexdigest()


@dataclass
class Section:
    """One section of fetched results, like ``NSFetchedResultsSectionInfo``."""

    #: The section key's value as text (``""`` for nil).
    name: str
    #: The name's capitalised first letter.
    index_title: str
    #: The ids of the section's objects, in order.
    ids: List[str] = field(default_factory=list)

    @property
    def number_of_objects(self) -> int:
        """How many objects the section has."""
        return len(self.ids)


class ResultsState:
    """One immutable snapshot of sectioned results: sections of ids, and each object's values."""

    def __init__(self, sections: Sequence[Section], values: Mapping[str, Any], seq: int = 0,
                 transaction: int = 0, related: Optional[Mapping[str, Any]] = None) -> None:
        self.sections: Tuple[Section, ...] = tuple(sections)
        self.values: Dict[str, Any] = dict(values)
        self.seq = seq
        self.transaction = transaction
        #: With ``prefetch``: the objects the rows reach, by id (DESIGN.md §7, Live relationships).
        self.related: Dict[str, Any] = dict(related or {})

    @classmethod
    def from_counts(cls, sections: Sequence[Mapping[str, Any]], ids: Sequence[str], values: Mapping[str, Any],
                    seq: int = 0, transaction: int = 0,
                    related: Optional[Mapping[str, Any]] = None) -> "ResultsState":
        """Builds a state from the wire's ``sections: [{name, indexTitle, count}]`` and the flat ordered ids.

        Raises:
            InconsistentDelta: the section counts do not add up to the number of ids.
        """
        built: List[Section] = []
        offset = 0
        for info in sections:
            count = int(info["count"])
            built.append(Section(info["name"], info.get("indexTitle", index_title(info["name"])),
                                 list(ids[offset:offset + count])))
            offset += count
        if offset != len(ids):
            raise InconsistentDelta(f"sections count {offset} objects but there are {len(ids)} ids")
        return cls(built, values, seq, transaction, related)

    @property
    def ids(self) -> List[str]:
        """Every id, in order."""
        return [object_id for section in self.sections for object_id in section.ids]

    def objects(self) -> List[Any]:
        """Every object's values, in order."""
        return [self.values.get(object_id) for object_id in self.ids]

    def applying(self, change: Mapping[str, Any]) -> "ResultsState":
        """The state after one ``results/didChange`` (DESIGN.md §7); ``self`` is left unchanged.

        Raises:
            InconsistentDelta: the change does not fit this state.
        """
        sections = [Section(s.name, s.index_title, list(s.ids)) for s in self.sections]
        values = dict(self.values)
        object_changes = list(change.get("objects", ()))
        section_changes = list(change.get("sections", ()))

        def path(value: Any, what: str) -> IndexPath:
            if not isinstance(value, (list, tuple)) or len(value) != 2:
                raise InconsistentDelta(f"{what} {value!r} is not a [section, row] index path")
            return int(value[0]), int(value[1])

        removals = sorted(
            ((path(c.get("indexPath"), "indexPath"), c["id"])
             for c in object_changes if c["type"] in ("delete", "move")),
            reverse=True)
        for (s, r), object_id in removals:
            if not (0 <= s < len(sections) and 0 <= r < len(sections[s].ids)) or sections[s].ids[r] != object_id:
                raise InconsistentDelta(f"{object_id} is not at old index path [{s}, {r}]")
            del sections[s].ids[r]
        for c in sorted((c for c in section_changes if c["type"] == "delete"), key=lambda c: c["index"], reverse=True):
            index = c["index"]
            if not 0 <= index < len(sections):
                raise InconsistentDelta(f"no section {index} to delete")
            if sections[index].ids:
                raise InconsistentDelta(f"deleted section {index} ({sections[index].name!r}) still has objects")
            del sections[index]
        for c in sorted((c for c in section_changes if c["type"] == "insert"), key=lambda c: c["index"]):
            index = c["index"]
            if not 0 <= index <= len(sections):
                raise InconsistentDelta(f"cannot insert section at {index} of {len(sections)}")
            name = c.get("name", "")
            sections.insert(index, Section(name, c.get("indexTitle", index_title(name))))
        insertions = sorted(
            ((path(c.get("newIndexPath"), "newIndexPath"), c["id"])
             for c in object_changes if c["type"] in ("insert", "move")))
        for (s, r), object_id in insertions:
            if not (0 <= s < len(sections) and 0 <= r <= len(sections[s].ids)):
                raise InconsistentDelta(f"cannot insert {object_id} at new index path [{s}, {r}]")
            sections[s].ids.insert(r, object_id)
        for c in object_changes:
            if c["type"] == "delete":
                values.pop(c["id"], None)
            elif "object" in c and c["object"] is not None:
                values[c["id"]] = c["object"]
            if c["type"] == "update":
                s, r = path(c.get("newIndexPath", c.get("indexPath")), "newIndexPath")
                if not (0 <= s < len(sections) and 0 <= r < len(sections[s].ids)) or sections[s].ids[r] != c["id"]:
                    raise InconsistentDelta(f"updated {c['id']} is not at new index path [{s}, {r}]")
        related = dict(self.related)
        related.update(change.get("related") or {})
        for object_id in change.get("relatedRemoved") or ():
            related.pop(object_id, None)
        return ResultsState(sections, values, int(change.get("seq", self.seq + 1)),
                            int(change.get("transaction", self.transaction)), related)

    def follow(self, obj: Union[str, Mapping[str, Any]], key: str) -> Any:
        """The object (or list of objects) a prefetched relationship ``key`` of ``obj`` (a row or
        a related object, or its id) points to, from :attr:`related`: no round trip. ``None`` (or
        a missing member of a list) where the object is not held: outside the key's scope."""
        values = obj if isinstance(obj, Mapping) else (self.values.get(obj) or self.related.get(obj) or {})
        target = values.get(key)
        if isinstance(target, list):
            return [self.related[i] for i in target if i in self.related]
        return self.related.get(target) if isinstance(target, str) else None


    def resumed(self, answer: Mapping[str, Any]) -> "ResultsState":
        """The state a resumed ``results/subscribe`` answer describes, rebuilt from this one (the
        results held as of the resume transaction): the named ids are dropped, the present ones
        put back at their index paths, every other id keeps its relative order, and the result is
        checked against the answer's digest. ``self`` is left unchanged.

        Raises:
            InconsistentDelta: the answer is not resumed, does not fit, or its digest differs
                (then read the results in full).
        """
        if answer.get("resumed") is not True or not isinstance(answer.get("changed"), list):
            raise InconsistentDelta("the answer is not a resumed one")
        infos = list(answer.get("sections", ()))
        starts: List[int] = []
        total = 0
        for info in infos:
            starts.append(total)
            total += int(info["count"])
        placed: List[Optional[str]] = [None] * total
        named = set()
        values = dict(self.values)
        for row in answer["changed"]:
            object_id = row["id"]
            if object_id in named:
                raise InconsistentDelta(f"{object_id} is named twice")
            named.add(object_id)
            values.pop(object_id, None)
            index_path = row.get("indexPath")
            if index_path is None:
                continue
            s, r = int(index_path[0]), int(index_path[1])
            if not (0 <= s < len(infos) and 0 <= r < int(infos[s]["count"])) or placed[starts[s] + r] is not None:
                raise InconsistentDelta(f"{object_id} is placed at {index_path}, outside the sections or on another row")
            placed[starts[s] + r] = object_id
            if row.get("object") is not None:
                values[object_id] = row["object"]
        kept = iter([i for i in self.ids if i not in named])
        ids: List[str] = []
        for slot in placed:
            if slot is None:
                slot = next(kept, None)
                if slot is None:
                    raise InconsistentDelta(f"the held results lack rows the answer counts ({total})")
            ids.append(slot)
        if next(kept, None) is not None:
            raise InconsistentDelta("the held results have more rows than the answer counts")
        if results_digest(ids) != answer.get("digest"):
            raise InconsistentDelta("the rebuilt ids do not match the daemon's digest")
        return ResultsState.from_counts(infos, ids, values, int(answer.get("seq", 0)),
                                        int(answer.get("transaction", 0)))


class FetchedResultsDelegate:
    """Callbacks in the shape of ``NSFetchedResultsControllerDelegate``; override what you need.

    They run on the client's dispatch thread, in this order per change: ``will_change_content``,
    ``did_change_section`` per section change, ``did_change_object`` per object change,
    ``did_change_content``. A resync calls ``did_reload`` instead.
    """

    def will_change_content(self, results: "FetchedResults") -> None:
        """The results are about to change."""

    def did_change_section(self, results: "FetchedResults", section: Section, index: int, change_type: str) -> None:
        """A section was inserted or deleted (``change_type`` ``"insert"``/``"delete"``)."""

    def did_change_object(self, results: "FetchedResults", obj: Any, index_path: Optional[IndexPath],
                          change_type: str, new_index_path: Optional[IndexPath]) -> None:
        """An object was inserted, deleted, moved or updated."""

    def did_change_content(self, results: "FetchedResults") -> None:
        """The change is applied."""

    def did_reload(self, results: "FetchedResults") -> None:
        """The results were reloaded from a snapshot (after a gap or invalidation)."""


class FetchedResults:
    """A live, sectioned mirror of a fetch request's results.

    Example::

        results = client.subscribe({"entity": "Team", "sort": [{"key": "qualifyingZone"}, {"key": "teamName"}]},
                                   section_key_path="qualifyingZone")
        for section in results.sections:
            print(section.name, [results.values[i]["teamName"] for i in section.ids])
        results.on_change(lambda results, change: print("changed:", change))

    Args:
        client: a connected :class:`~depot.client.Client` (or any :class:`ResultsClient`).
        request: the fetch request; ``sort`` is required by the daemon.
        section_key_path: the key whose value names each object's section.
        cache_name: keep the results on the daemon's disk under this name.
        include: ``"firstBatch"`` (default), ``"all"`` or ``"none"``; missing objects are
            loaded with ``results/objects`` before the constructor returns.
        delegate: a :class:`FetchedResultsDelegate`.
        page_size: objects per ``results/objects`` call.
        timeout: seconds to wait for the subscription.
    """

    def __init__(self, client: ResultsClient, request: Mapping[str, Any], *, section_key_path: Optional[str] = None,
                 cache_name: Optional[str] = None, include: str = "firstBatch",
                 delegate: Optional[FetchedResultsDelegate] = None, page_size: int = 500,
                 timeout: Optional[float] = None, **options: Any) -> None:
        self._client = client
        self.request = dict(request)
        self.section_key_path = section_key_path
        self.delegate = delegate
        self.page_size = page_size
        #: The subscription's id once subscribed.
        self.subscription: Optional[str] = None
        #: Whether the daemon started from its on-disk cache.
        self.from_cache = False
        #: How many times the mirror resynced from a snapshot (after a gap, an invalidation or a bad delta).
        self.resync_count = 0
        self._state = ResultsState([], {})
        self._condition = threading.Condition()
        self._callbacks: List[ChangeCallback] = []
        #: Why the daemon ended the subscription (``"model"``: a migration renamed a key the request
        #: names; subscribe again with the new names), or ``None`` while it is live.
        self.ended: Optional[str] = None
        self._buffer: List[Dict[str, Any]] = []
        self._ready = False
        self._resyncing = False
        self._closed = False
        self._removers = [
            client.on_notification("results/didChange", self._on_did_change),
            client.on_notification("results/didInvalidate", self._on_did_invalidate),
        ]
        params: Dict[str, Any] = {"request": self.request, "include": include, **options}
        if section_key_path is not None:
            params["sectionKeyPath"] = section_key_path
        if cache_name is not None:
            params["cacheName"] = cache_name
        self._params = params
        self._timeout = timeout
        #: How many times :meth:`resume_subscription` resumed (rather than read everything again).
        self.resume_count = 0
        try:
            client.request("results/subscribe", params, on_response=self._on_subscribed).result(timeout)
        except BaseException:
            self._remove_listeners()
            raise
        track = getattr(client, "_track", None)
        if track is not None:
            track(self)

    def _resubscribe(self) -> None:
        """Subscribes again after the daemon lost the session: resumed from the results held
        (:meth:`resume_subscription`, DESIGN.md §7), read in full where it cannot resume."""
        if self._closed:
            return
        self._buffer.clear()
        self.resume_subscription(timeout=self._timeout)
        self.resync_count += 1

    # -- reading ---------------------------------------------------------------------------

    @property
    def state(self) -> ResultsState:
        """The current snapshot (immutable; a new one replaces it on every change)."""
        return self._state

    @property
    def sections(self) -> Tuple[Section, ...]:
        """The sections, in order."""
        return self._state.sections

    @property
    def values(self) -> Dict[str, Any]:
        """Every object's values, by id."""
        return self._state.values

    @property
    def related(self) -> Dict[str, Any]:
        """With ``prefetch``: the objects the rows reach, by id, kept live (DESIGN.md §7)."""
        return self._state.related

    def follow(self, obj: Union[str, Mapping[str, Any]], key: str) -> Any:
        """A prefetched relationship of a row or related object, without a round trip
        (:meth:`ResultsState.follow`), e.g. ``results.follow(match, "homeTeam")["teamName"]``."""
        return self._state.follow(obj, key)

    @property
    def fetched_objects(self) -> List[Any]:
        """Every object, in order."""
        return self._state.objects()

    @property
    def ids(self) -> List[str]:
        """Every id, in order."""
        return self._state.ids

    @property
    def seq(self) -> int:
        """The ``seq`` of the last change applied."""
        return self._state.seq

    @property
    def transaction(self) -> int:
        """The last transaction the results include."""
        return self._state.transaction

    @property
    def section_index_titles(self) -> List[str]:
        """Each section's index title, without repeats, in order."""
        titles: List[str] = []
        for section in self.sections:
            if section.index_title not in titles:
                titles.append(section.index_title)
        return titles

    def object_at(self, index_path: Sequence[int]) -> Any:
        """The object at ``[section, row]``."""
        section, row = index_path
        return self._state.values.get(self.sections[section].ids[row])

    def index_path_for(self, obj: Union[str, Mapping[str, Any]]) -> Optional[IndexPath]:
        """Where the object (or id) is, or ``None``."""
        object_id = obj if isinstance(obj, str) else obj.get("id")
        for s, section in enumerate(self.sections):
            if object_id in section.ids:
                return s, section.ids.index(object_id)
        return None

    def as_sections(self) -> List[Tuple[str, List[Any]]]:
        """``[(section name, [objects])]``: the whole results as plain values."""
        return [(s.name, [self._state.values.get(i) for i in s.ids]) for s in self.sections]

    def as_table(self, keys: Optional[Sequence[str]] = None, max_width: int = 40) -> str:
        """The results as a printable text table: a header row, then one row per object
        (``id`` and the values of ``keys``, all keys by default), sections as ``== name ==`` lines.

        Example::

            print(results.as_table(["teamName", "wins"]))
        """
        return format_table(self.as_sections(), keys, sectioned=self.section_key_path is not None,
                            max_width=max_width)

    # -- callbacks and waiting ----------------------------------------------------------------

    def on_change(self, callback: ChangeCallback) -> None:
        """Calls ``callback(results, change)`` after each change; ``change`` is ``None`` for a reload."""
        self._callbacks.append(callback)

    def wait_for_transaction(self, transaction: int, timeout: float = 10.0) -> bool:
        """Waits until the results include ``transaction``; ``False`` on timeout."""
        with self._condition:
            return self._condition.wait_for(lambda: self._state.transaction >= transaction, timeout)

    def close(self) -> None:
        """``results/unsubscribe`` and stop listening."""
        if self._closed:
            return
        self._closed = True
        self._remove_listeners()
        if self.subscription is not None:
            try:
                self._client.call("results/unsubscribe", {"subscription": self.subscription})
            except DepotError:
                pass

    def resume_subscription(self, client: Optional[ResultsClient] = None,
                            timeout: Optional[float] = None) -> bool:
        """Subscribes again (after a new session: a daemon restart, a dropped link) from the results
        held, with ``resume`` (DESIGN.md §7, Resuming): the daemon names only the rows that changed
        since, and the results are rebuilt from them and checked against its digest. Where it
        answers in full (history no longer reaches back) or the digest differs, the results are read
        in full from the new subscription. Either way the delegate hears ``did_reload`` and the
        change callbacks ``None``.

        Args:
            client: the client of the new session, when it is another object than the one given to
                the constructor; the notifications are then heard from it.
            timeout: seconds to wait for the answer.

        Returns:
            whether the results were resumed (``False``: read in full).
        """
        # On the same session the old subscription may still be live: it goes once the new one answers.
        previous = self.subscription if client is None or client is self._client else None
        if client is not None and client is not self._client:
            self._remove_listeners()
            self._client = client
            self._removers = [
                client.on_notification("results/didChange", self._on_did_change),
                client.on_notification("results/didInvalidate", self._on_did_invalidate),
            ]
        held = self._state
        params = dict(self._params)
        params["resume"] = {"transaction": held.transaction, "digest": results_digest(held.ids)}
        outcome: Dict[str, bool] = {}

        def on_response(result: Any, error: Optional[DepotError]) -> None:
            if error is not None:
                return
            self.subscription = result["subscription"]
            self._buffer = [p for p in self._buffer if p.get("subscription") == self.subscription]
            try:
                self._set_state(held.resumed(result))
                outcome["resumed"] = True
                self.resume_count += 1
            except InconsistentDelta:
                outcome["resumed"] = False
                self._resync(notify=False)
            self._ready = True
            if self.delegate is not None:
                self.delegate.did_reload(self)
            for callback in list(self._callbacks):
                callback(self, None)
            self._drain_buffer()

        self._ready = False
        self._client.request("results/subscribe", params, on_response=on_response).result(timeout)
        if previous is not None and previous != self.subscription:
            try:
                self._client.call("results/unsubscribe", {"subscription": previous})
            except DepotError:
                pass  # Gone with its session already.
        return outcome.get("resumed", False)

    def __enter__(self) -> "FetchedResults":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # -- the engine (dispatch thread) -------------------------------------------------------------

    def _remove_listeners(self) -> None:
        for remove in self._removers:
            remove()

    def _on_subscribed(self, result: Any, error: Optional[DepotError]) -> None:
        if error is not None:
            return
        self.subscription = result["subscription"]
        self.from_cache = bool(result.get("fromCache"))
        objects = result.get("objects") or []
        if len(objects) == result.get("count", 0):
            ids = [o["id"] for o in objects]
            self._set_state(ResultsState.from_counts(
                result.get("sections", []), ids, {o["id"]: o for o in objects},
                int(result.get("seq", 0)), int(result.get("transaction", 0)), result.get("related")))
        else:
            self._resync(notify=False)
        self._ready = True
        self._drain_buffer()

    def _on_did_change(self, method: str, params: Any) -> None:
        if not isinstance(params, dict) or self._closed:
            return
        if not self._ready or self._resyncing:
            self._buffer.append(params)
            return
        if params.get("subscription") != self.subscription:
            return
        seq = int(params.get("seq", 0))
        if seq <= self._state.seq:
            return  # Already covered by a snapshot.
        if seq != self._state.seq + 1:
            self._buffer.append(params)
            self._resync()
            return
        try:
            new_state = self._state.applying(params)
        except InconsistentDelta:
            self._resync()
            return
        old_state = self._state
        self._announce_change(old_state, new_state, params)

    def _on_did_invalidate(self, method: str, params: Any) -> None:
        if isinstance(params, dict) and params.get("subscription") == self.subscription and self._ready:
            if params.get("reason") == "model":
                # A migration renamed a key the request names: the daemon ended the subscription.
                self.ended = "model"
                return
            self._resync()

    def _announce_change(self, old: ResultsState, new: ResultsState, change: Dict[str, Any]) -> None:
        delegate = self.delegate
        if delegate is not None:
            delegate.will_change_content(self)
        self._set_state(new)
        if delegate is not None:
            for c in change.get("sections", ()):
                sections = old.sections if c["type"] == "delete" else new.sections
                section = sections[c["index"]] if c["index"] < len(sections) else Section(c.get("name", ""), "")
                delegate.did_change_section(self, section, c["index"], c["type"])
            for c in change.get("objects", ()):
                obj = c.get("object") if c["type"] != "delete" else old.values.get(c["id"], {"id": c["id"]})
                old_path = tuple(c["indexPath"]) if c.get("indexPath") is not None else None
                new_path = tuple(c["newIndexPath"]) if c.get("newIndexPath") is not None else None
                delegate.did_change_object(self, obj, old_path, c["type"], new_path)
            delegate.did_change_content(self)
        for callback in list(self._callbacks):
            callback(self, change)

    def _set_state(self, state: ResultsState) -> None:
        with self._condition:
            self._state = state
            self._condition.notify_all()

    def _resync(self, notify: bool = True, attempts: int = 5) -> None:
        """Reloads ids from ``results/snapshot`` and values from ``results/objects``."""
        self._resyncing = True
        try:
            for _ in range(attempts):
                snapshot = self._client.call("results/snapshot", {"subscription": self.subscription})
                ids: List[str] = list(snapshot["ids"])
                values: Dict[str, Any] = {}
                related: Dict[str, Any] = {}
                consistent = True
                for offset in range(0, len(ids), self.page_size):
                    page = self._client.call("results/objects", {
                        "subscription": self.subscription, "offset": offset, "length": self.page_size})
                    if page.get("seq") != snapshot["seq"]:
                        consistent = False  # The results moved on while paging: start over.
                        break
                    # Every row carries its id, a group's included (DESIGN.md §7).
                    values.update({o["id"]: o for o in page["objects"] if isinstance(o, dict)})
                    related.update(page.get("related") or {})
                if consistent and all(i in values for i in ids):
                    self.resync_count += 1 if notify else 0
                    self._set_state(ResultsState.from_counts(
                        snapshot["sections"], ids, values, int(snapshot["seq"]), int(snapshot["transaction"]),
                        related))
                    break
        finally:
            self._resyncing = False
        if notify:
            if self.delegate is not None:
                self.delegate.did_reload(self)
            for callback in list(self._callbacks):
                callback(self, None)
        self._drain_buffer()

    def _drain_buffer(self) -> None:
        buffered = sorted((p for p in self._buffer if p.get("subscription") == self.subscription),
                          key=lambda p: int(p.get("seq", 0)))
        self._buffer = []
        for params in buffered:
            self._on_did_change("results/didChange", params)
