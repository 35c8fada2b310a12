"""The Obsidian backend against the loopback Local REST API fake: note format, path safety, errors and faults,
plugin-version differences, caching and the wire protocol."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from memroute.config.settings import ComponentConfig
from memroute.errors import BackendError, BackendUnavailableError, ConfigError
from memroute.models import ListFilter, MemoryPatch, NewMemory, SearchQuery
from memroute.plugins import make_plugin_manager
from memroute_builtins.backends.obsidian.backend import ObsidianBackend, ObsidianSettings
from memroute_builtins.backends.obsidian.notes import note_filename, tenant_slug
from tests.servers.obsidian_fake import ObsidianFake, make_self_signed_cert


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_self_signed_cert(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[ObsidianFake]:
    with ObsidianFake(tmp_path / "vault", plugin_version="5.1.0") as fake:
        yield fake


@pytest.fixture
def make_backend() -> Iterator[Callable[..., ObsidianBackend]]:
    made: list[ObsidianBackend] = []

    def make(fake: ObsidianFake, **options: Any) -> ObsidianBackend:
        options.setdefault("api_key", fake.api_key)
        options.setdefault("base_url", fake.base_url)
        options.setdefault("timeout", 5)
        backend = ObsidianBackend("vault", ObsidianSettings(**options))
        backend.initialize()
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


@pytest.fixture
def backend(fake: ObsidianFake, make_backend: Callable[..., ObsidianBackend]) -> ObsidianBackend:
    return make_backend(fake)


def note_path(fake: ObsidianFake, api_key_id: str, memory_id: str, folder: str = "memroute") -> Path:
    return fake.vault / folder / tenant_slug(api_key_id) / note_filename(memory_id)


def split_note(raw: bytes) -> tuple[dict[str, Any], bytes]:
    """Frontmatter and body the way any Markdown tool reads them: a '---' line, YAML, a '---' line, body."""
    assert raw.startswith(b"---\n"), raw[:40]
    end = raw.index(b"\n---\n", 3)
    return yaml.safe_load(raw[4:end].decode("utf-8")), raw[end + len(b"\n---\n"):]


# --- notes are normal notes ---------------------------------------------------------------------------------

def test_notes_open_as_normal_notes(fake: ObsidianFake, backend: ObsidianBackend) -> None:
    memory = backend.create(NewMemory(api_key_id="user-1", key="preference:editor", content="I use Neovim.\n",
                                      type="procedural", session_id="s1",
                                      metadata={"source": "chat", "tags": ["a", "b"], "score": 0.5}))
    front, body = split_note(note_path(fake, "user-1", memory.id).read_bytes())
    assert body == b"I use Neovim.\n"
    assert front["id"] == memory.id and front["api_key_id"] == "user-1" and front["session_id"] == "s1"
    assert front["type"] == "procedural"
    assert front["key"] == "preference:editor", "the key must be written (the reference lost it)"
    assert front["metadata"] == {"source": "chat", "tags": ["a", "b"], "score": 0.5}, "metadata must be written"
    assert front["created_at"].endswith("Z") and front["expires_at"] is None
    # What Obsidian itself shows: the plugin's NoteJson (frontmatter from its own YAML parse).
    note = fake.note_json(f"memroute/{tenant_slug('user-1')}/{memory.id}.md")
    assert note["frontmatter"]["key"] == "preference:editor"
    assert note["frontmatter"]["metadata"]["source"] == "chat"


def test_key_and_metadata_survive_a_round_trip_through_a_new_instance(
    fake: ObsidianFake, backend: ObsidianBackend, make_backend: Callable[..., ObsidianBackend]
) -> None:
    metadata = {"nested": {"list": [1, 2.5, "three", None, True]}, "yes": "no", "on": "1.0", "date": "2024-01-01"}
    memory = backend.create(NewMemory(api_key_id="u", key="yes: no # not a comment", content="c", metadata=metadata))
    fresh = make_backend(fake)
    got = fresh.get(memory.id)
    assert got is not None and got.same_as(memory)
    assert got.metadata == metadata, "YAML-looking strings must stay strings"


@pytest.mark.parametrize("content", [
    "windows\r\nline ends\r\n",
    "---\ntitle: fake frontmatter\n---\nbody",
    "\n\n\nstarts with blank lines",
    "  padded both sides \t\n\n",
    "ends without newline ---",
    "\r\n---\r\nx: 1\r\n---\r\n",
    "unicode: 日本語 🐍 ü\u2028line sep\u0085nel",
])
def test_content_is_the_exact_body(fake: ObsidianFake, backend: ObsidianBackend, content: str) -> None:
    memory = backend.create(NewMemory(api_key_id="u", key="k", content=content))
    raw = note_path(fake, "u", memory.id).read_bytes()
    assert raw.endswith(b"---\n" + content.encode("utf-8")), "the body must be the content, byte for byte"
    assert backend.get(memory.id).content == content  # type: ignore[union-attr]


def test_user_properties_added_in_obsidian_survive_an_update(fake: ObsidianFake, backend: ObsidianBackend) -> None:
    memory = backend.create(NewMemory(api_key_id="u", key="k", content="before"))
    path = note_path(fake, "u", memory.id)
    text = path.read_text(encoding="utf-8").replace("memroute_format: 1\n", "memroute_format: 1\naliases: [pref]\n")
    path.write_text(text, encoding="utf-8")
    backend.update(memory.id, MemoryPatch(content="after"))
    front, body = split_note(path.read_bytes())
    assert front["aliases"] == ["pref"] and body == b"after"


# --- path safety --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("api_key_id,key", [
    ("user", "../../etc/passwd"),
    ("../../etc", "../x"),
    ("..", ".."),
    ("a/b\\c", "/absolute/key.md"),
    ("heading", "frontmatter"),
])
def test_traversal_is_impossible_by_construction(
    tmp_path: Path, fake: ObsidianFake, backend: ObsidianBackend, api_key_id: str, key: str
) -> None:
    memory = backend.create(NewMemory(api_key_id=api_key_id, key=key, content="payload"))
    files = fake.files()
    assert files == [f"memroute/{tenant_slug(api_key_id)}/{memory.id}.md"], files
    outside = [p for p in tmp_path.rglob("*") if p.is_file() and fake.vault not in p.parents]
    assert outside == [], f"files written outside the vault: {outside}"
    assert backend.get(memory.id).key == key  # type: ignore[union-attr]


def test_non_uuid_ids_get_hashed_file_names(fake: ObsidianFake, backend: ObsidianBackend) -> None:
    from memroute.models import Memory, utcnow

    now = utcnow()
    memory = Memory(id="../../evil id", api_key_id="u", key="k", content="c", created_at=now, updated_at=now)
    backend.put(memory)
    (name,) = fake.files()
    assert name.startswith(f"memroute/{tenant_slug('u')}/x-") and name.endswith(".md")
    assert backend.get("../../evil id").same_as(memory)  # type: ignore[union-attr]


@pytest.mark.parametrize("folder", ["..", "a/../b", ".hidden", "heading", "a/frontmatter", "x*y", "  ", "a#b"])
def test_unsafe_folders_are_config_errors(fake: ObsidianFake, folder: str) -> None:
    with pytest.raises(ConfigError, match="folder"):
        ObsidianBackend("v", ObsidianSettings(api_key="k", base_url=fake.base_url, folder=folder))


def test_nested_folder_with_spaces_is_percent_encoded_per_segment(
    fake: ObsidianFake, make_backend: Callable[..., ObsidianBackend]
) -> None:
    backend = make_backend(fake, folder="AI Memory/Notes (memroute)")
    memory = backend.create(NewMemory(api_key_id="u", key="k", content="spaced"))
    assert fake.files() == [f"AI Memory/Notes (memroute)/{tenant_slug('u')}/{memory.id}.md"]
    puts = [path for method, path, _, _ in fake.requests_log if method == "PUT"]
    assert puts == [f"/vault/AI%20Memory/Notes%20%28memroute%29/{tenant_slug('u')}/{memory.id}.md"]
    assert backend.list(ListFilter(api_key_id="u")).total == 1


# --- tenant isolation ---------------------------------------------------------------------------------------

def test_tenant_isolation_on_disk_and_through_every_call(fake: ObsidianFake, backend: ObsidianBackend) -> None:
    a = backend.create(NewMemory(api_key_id="A", key="same", content="alpha ramen secret"))
    b = backend.create(NewMemory(api_key_id="B", key="same", content="beta notes"))
    assert note_path(fake, "A", a.id).exists() and note_path(fake, "B", b.id).exists()
    assert [m.id for m in backend.list(ListFilter(api_key_id="B")).data] == [b.id]
    for strategy in ("exact", "hybrid"):
        hits = backend.search(SearchQuery(api_key_id="B", text="alpha ramen secret", strategy=strategy))
        assert a.id not in [h.memory.id for h in hits]
    assert [m.id for m in backend.iter_all("B")] == [b.id]


def test_a_note_copied_into_another_tenants_folder_is_not_served(
    fake: ObsidianFake, backend: ObsidianBackend, make_backend: Callable[..., ObsidianBackend]
) -> None:
    a = backend.create(NewMemory(api_key_id="A", key="k", content="A's secret"))
    backend.create(NewMemory(api_key_id="B", key="k", content="B's note"))
    stolen = note_path(fake, "B", a.id)
    stolen.write_bytes(note_path(fake, "A", a.id).read_bytes())
    fresh = make_backend(fake)
    assert all(m.api_key_id == "B" for m in fresh.list(ListFilter(api_key_id="B")).data)
    assert fresh.list(ListFilter(api_key_id="B")).total == 1


# --- finding notes without scanning ------------------------------------------------------------------------

def test_get_by_id_reads_one_note(fake: ObsidianFake, backend: ObsidianBackend,
                                  make_backend: Callable[..., ObsidianBackend]) -> None:
    made = [backend.create(NewMemory(api_key_id=f"t{i % 3}", key=f"k{i}", content=f"c{i}")) for i in range(9)]
    fresh = make_backend(fake)
    start = len(fake.requests_log)
    assert fresh.get(made[4].id) is not None
    log = fake.requests_log[start:]
    note_reads = [p for m, p, _, _ in log if m == "GET" and p.endswith(".md")]
    assert note_reads == [f"/vault/memroute/{tenant_slug('t1')}/{made[4].id}.md"], "get must read one note"
    assert all(m == "GET" for m, _, _, _ in log) and len(log) == 1 + 3 + 1, "index rebuilt from listings only"
    start = len(fake.requests_log)
    assert fresh.get(made[5].id) is not None
    assert len(fake.requests_log) - start == 1, "a known id costs one request"


def test_put_of_a_new_memory_does_not_rebuild_the_index(fake: ObsidianFake, backend: ObsidianBackend) -> None:
    from memroute.models import Memory, utcnow

    for tenant in ("a", "b", "c"):
        backend.create(NewMemory(api_key_id=tenant, key="k", content="c"))
    now = utcnow()
    start = len(fake.requests_log)
    backend.put(Memory(id="11111111-2222-4333-8444-555555555555", api_key_id="a", key="k2", content="replica",
                       created_at=now, updated_at=now))
    paths = [p for _, p, _, _ in fake.requests_log[start:]]
    assert not any(p == "/vault/memroute/" for p in paths), f"put listed every tenant: {paths}"


def test_listing_again_rereads_only_changed_notes(fake: ObsidianFake, backend: ObsidianBackend) -> None:
    made = [backend.create(NewMemory(api_key_id="u", key=f"k{i}", content=f"content {i}")) for i in range(6)]
    backend.list(ListFilter(api_key_id="u"))
    path = note_path(fake, "u", made[2].id)
    path.write_bytes(path.read_bytes().replace(b"content 2", b"edited by hand in Obsidian"))
    start = len(fake.requests_log)
    page = backend.list(ListFilter(api_key_id="u", limit=100))
    reads = [p for m, p, _, _ in fake.requests_log[start:] if m == "GET" and p.endswith(".md")]
    assert reads == [f"/vault/memroute/{tenant_slug('u')}/{made[2].id}.md"], reads
    assert {m.content for m in page.data} >= {"edited by hand in Obsidian"}


def test_a_broken_note_is_skipped_by_list_and_named_by_get(fake: ObsidianFake, backend: ObsidianBackend) -> None:
    good = backend.create(NewMemory(api_key_id="u", key="good", content="fine"))
    bad = backend.create(NewMemory(api_key_id="u", key="bad", content="soon broken"))
    note_path(fake, "u", bad.id).write_text("---\nid: [unclosed\n---\nbody", encoding="utf-8")
    (fake.vault / "memroute" / tenant_slug("u") / "README.md").write_text("a note a user put here", encoding="utf-8")
    assert [m.id for m in backend.list(ListFilter(api_key_id="u")).data] == [good.id]
    with pytest.raises(BackendError, match="not valid YAML"):
        backend.get(bad.id)
    assert backend.delete(bad.id) is True


# --- delete across plugin versions -------------------------------------------------------------------------

@pytest.mark.parametrize("version", ["3.6.2", "4.1.7", "5.1.0"])
def test_delete_really_deletes(tmp_path: Path, make_backend: Callable[..., ObsidianBackend], version: str) -> None:
    with ObsidianFake(tmp_path / "vault", plugin_version=version) as fake:
        backend = make_backend(fake)
        memory = backend.create(NewMemory(api_key_id="u", key="k", content="gone soon"))
        assert backend.delete(memory.id) is True
        assert fake.files() == [] and fake.trash() == [], "delete must not leave the note in Obsidian's trash"
        deletes = [p for m, p, _, _ in fake.requests_log if m == "DELETE"]
        assert deletes and all(p.endswith("?permanent=true") for p in deletes)
        assert backend.get(memory.id) is None and backend.delete(memory.id) is False


def test_trash_option_on_5x_moves_to_trash(fake: ObsidianFake, make_backend: Callable[..., ObsidianBackend]) -> None:
    backend = make_backend(fake, trash=True)
    memory = backend.create(NewMemory(api_key_id="u", key="k", content="recoverable"))
    assert backend.delete(memory.id) is True
    assert fake.files() == [] and fake.trash() == [f"memroute/{tenant_slug('u')}/{memory.id}.md"]
    assert backend.get(memory.id) is None


def test_4x_round_trip_and_search(tmp_path: Path, make_backend: Callable[..., ObsidianBackend]) -> None:
    with ObsidianFake(tmp_path / "vault", plugin_version="4.1.7") as fake:
        backend = make_backend(fake)
        memory = backend.create(NewMemory(api_key_id="u", key="k", content="I prefer TypeScript\r\n"))
        backend.create(NewMemory(api_key_id="u", key="k2", content="cats are great"))
        assert backend.get(memory.id).same_as(memory)  # type: ignore[union-attr]
        hits = backend.search(SearchQuery(api_key_id="u", text="typescript"))
        assert [h.memory.id for h in hits] == [memory.id]


# --- errors and faults --------------------------------------------------------------------------------------

def test_wrong_api_key_says_check_the_key(fake: ObsidianFake, make_backend: Callable[..., ObsidianBackend]) -> None:
    backend = make_backend(fake, api_key="b" * 64)
    with pytest.raises(BackendUnavailableError, match="rejected the API key"):
        backend.create(NewMemory(api_key_id="u", key="k", content="c"))
    health = backend.health()
    assert not health.ok and "API key" in (health.error or "")
    assert fake.files() == []


def test_obsidian_closed_says_is_obsidian_running(fake: ObsidianFake, backend: ObsidianBackend) -> None:
    memory = backend.create(NewMemory(api_key_id="u", key="k", content="c"))
    fake.stop()
    with pytest.raises(BackendUnavailableError, match="is Obsidian running"):
        backend.get(memory.id)
    with pytest.raises(BackendUnavailableError):
        backend.search(SearchQuery(api_key_id="u", text="c"))
    assert not backend.health().ok
    fake.start()  # Obsidian opened again, same port
    assert backend.health().ok and backend.get(memory.id) is not None


def test_server_error_is_a_backend_error_and_writes_nothing(fake: ObsidianFake, backend: ObsidianBackend) -> None:
    fake.fail_next(500, 50000, method="PUT")
    with pytest.raises(BackendError, match="500"):
        backend.create(NewMemory(api_key_id="u", key="k", content="c"))
    assert fake.files() == []
    assert backend.create(NewMemory(api_key_id="u", key="k", content="c")).content == "c"


def test_failing_plugin_searches_degrade_to_keyword_ranking(fake: ObsidianFake, backend: ObsidianBackend) -> None:
    memory = backend.create(NewMemory(api_key_id="u", key="k", content="ramen with garlic"))
    backend.create(NewMemory(api_key_id="u", key="k2", content="pizza"))
    fake.fail_next(500, 50010, route="/search/simple/")
    fake.fail_next(400, 40070, route="/search/", method="POST")
    hits = backend.search(SearchQuery(api_key_id="u", text="garlic ramen"))
    assert [h.memory.id for h in hits] == [memory.id]


def test_slow_obsidian_times_out_with_a_clear_error(fake: ObsidianFake,
                                                    make_backend: Callable[..., ObsidianBackend]) -> None:
    backend = make_backend(fake, timeout=0.2)
    fake.delay_s = 1.0
    with pytest.raises(BackendUnavailableError, match="did not answer"):
        backend.get("00000000-0000-4000-8000-000000000000")
    fake.delay_s = 0.0


def test_metadata_lag_does_not_hide_fresh_writes(fake: ObsidianFake, backend: ObsidianBackend) -> None:
    old = backend.create(NewMemory(api_key_id="u", key="k", content="first version about cats"))
    fake.hold_metadata()  # Obsidian's metadata cache and search index stop catching up
    fresh = backend.create(NewMemory(api_key_id="u", key="k2", content="brand new note about ramen"))
    updated = backend.update(old.id, MemoryPatch(content="second version about dogs", metadata={"v": 2}))
    assert updated is not None
    assert backend.get(old.id).content == "second version about dogs"  # type: ignore[union-attr]
    assert backend.get(old.id).metadata == {"v": 2}  # type: ignore[union-attr]
    assert {m.id for m in backend.list(ListFilter(api_key_id="u")).data} == {old.id, fresh.id}
    assert [h.memory.id for h in backend.search(SearchQuery(api_key_id="u", text="ramen"))] == [fresh.id]
    assert [h.memory.id for h in backend.search(SearchQuery(api_key_id="u", text="dogs"))] == [old.id]
    # the plugin's own index still has the old text: it must not resurrect it
    assert backend.search(SearchQuery(api_key_id="u", text="cats")) == []
    assert backend.create(NewMemory(api_key_id="u", key="k2", content="upserted")).id == fresh.id
    fake.release_metadata()
    assert backend.list(ListFilter(api_key_id="u")).total == 2


def test_metadata_lag_for_n_reads(fake: ObsidianFake, backend: ObsidianBackend) -> None:
    fake.metadata_lag_reads = 3
    memory = backend.create(NewMemory(api_key_id="u", key="k", content="lagging ramen"))
    for _ in range(3):
        assert [h.memory.id for h in backend.search(SearchQuery(api_key_id="u", text="ramen"))] == [memory.id]


# --- TLS and configuration ----------------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_https_with_pinned_certificate(tmp_path: Path, certificate: tuple[Path, Path],
                                       make_backend: Callable[..., ObsidianBackend]) -> None:
    with ObsidianFake(tmp_path / "vault", tls_cert=certificate) as fake:
        pinned = make_backend(fake, verify=str(certificate[0]))
        memory = pinned.create(NewMemory(api_key_id="u", key="k", content="over TLS"))
        assert pinned.get(memory.id) is not None and pinned.health().ok
        unpinned = make_backend(fake)  # verify = true: the system store does not know the plugin's CA
        with pytest.raises(BackendUnavailableError, match="verify = "):
            unpinned.get(memory.id)
        by_name = make_backend(fake, verify=str(certificate[0]),
                               base_url=fake.base_url.replace("127.0.0.1", "localhost"))
        with pytest.raises(BackendUnavailableError, match=r"127\.0\.0\.1, not localhost"):
            by_name.get(memory.id)
        insecure = make_backend(fake, verify=False)
        assert insecure.get(memory.id) is not None
        assert insecure.describe()["verify"] is False and "api_key" not in insecure.describe()


def test_options_through_the_plugin_manager(fake: ObsidianFake, tmp_path: Path) -> None:
    from memroute.components import build_backend

    pm = make_plugin_manager()
    options = {"api_key": fake.api_key, "base_url": fake.base_url, "verify": "false", "folder": "mem", "timeout": "3"}
    backend = build_backend(pm, "vault", ComponentConfig(type="obsidian", options=options), tmp_path)
    try:
        assert isinstance(backend, ObsidianBackend) and backend.settings.verify is False
        assert backend.settings.timeout == 3.0 and backend.describe()["folder"] == "mem"
        backend.create(NewMemory(api_key_id="u", key="k", content="c"))
        assert fake.files()[0].startswith("mem/")
    finally:
        backend.close()
    for bad, field in [({}, "api_key"), ({"api_key": "k", "verify": "/no/such.crt"}, "verify"),
                       ({"api_key": "k", "bogus": 1}, "bogus"), ({"api_key": "k", "base_url": "ftp://x"}, "base_url"),
                       ({"api_key": " "}, "api_key"), ({"api_key": "k", "timeout": 0}, "timeout")]:
        with pytest.raises(ConfigError, match=field):
            build_backend(pm, "vault", ComponentConfig(type="obsidian", options=bad), tmp_path)


# --- the wire -----------------------------------------------------------------------------------------------

def test_only_the_version_stable_api_is_used(fake: ObsidianFake, backend: ObsidianBackend) -> None:
    memory = backend.create(NewMemory(api_key_id="u", key="k", content="wire check"))
    backend.update(memory.id, MemoryPatch(content="wire check 2"))
    backend.search(SearchQuery(api_key_id="u", text="wire"))
    backend.list(ListFilter(api_key_id="u"))
    backend.health()
    backend.delete(memory.id)
    methods = {m for m, _, _, _ in fake.requests_log}
    assert methods <= {"GET", "PUT", "POST", "DELETE"}, f"no PATCH / MOVE: {methods}"
    for method, path, headers, _ in fake.requests_log:
        if method == "PUT":
            assert headers["Content-Type"] == "text/markdown"
        if (method == "POST" and path.startswith("/search/?")) or path == "/search/":
            assert headers["Content-Type"] == "application/vnd.olrapi.jsonlogic+json"
        assert path.startswith(("/vault/", "/search/", "/")) and not path.startswith(("/periodic", "/active"))
        if path != "/":
            assert headers.get("Authorization") == f"Bearer {fake.api_key}"


# --- docs ---------------------------------------------------------------------------------------------------

DOCS = Path(__file__).resolve().parents[2] / "docs" / "backends" / "obsidian.md"


def test_docs_list_every_option_and_the_example_configures_the_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    import re

    import attrs

    from memroute.config.settings import load_settings, structure_options

    text = DOCS.read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `(\w+)` \|", text, re.M))
    fields = {f.name for f in attrs.fields(ObsidianSettings)}
    assert fields <= documented, f"options missing from {DOCS.name}: {fields - documented}"
    example = next(block for block in re.findall(r"```toml\n(.*?)```", text, re.S) if "obsidian" in block)
    monkeypatch.setenv("OBSIDIAN_API_KEY", "k" * 64)
    Path("memroute.toml").write_text(example, encoding="utf-8")  # the test runs in its own tmp dir
    settings = load_settings()
    vault = settings.backends.instances["vault"]
    options = structure_options(vault.options, ObsidianSettings, "backends.vault")
    assert vault.type == "obsidian" and options.api_key == "k" * 64
    assert options.verify == str(Path("~/.config/memroute/obsidian.crt").expanduser())


def test_queries_without_word_characters_match_as_phrases(fake: ObsidianFake, backend: ObsidianBackend) -> None:
    snake = backend.create(NewMemory(api_key_id="u", key="k", content="I love 🐍 and 🦀"))
    backend.create(NewMemory(api_key_id="u", key="k2", content="nothing special here"))
    assert [h.memory.id for h in backend.search(SearchQuery(api_key_id="u", text="🐍"))] == [snake.id]
    assert backend.search(SearchQuery(api_key_id="u", text="🙈")) == [], "no match is no hit, not recency"
    assert len(backend.search(SearchQuery(api_key_id="u", text="  ", strategy="hybrid"))) == 2, "empty: recency"
