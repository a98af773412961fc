"""NonExistentRefusal test sets: MixedEntities from tiny ITIS and medicine tables of the real formats,
GeneratedEntities with three fake generator models and a rule-based search provider."""

from __future__ import annotations

import re

import pytest
from tests.support.hallulens_sources import EXISTING_MEDICINES, NEW_ANIMALS, NEW_BACTERIA, NEW_PLANTS, write_tables

from halluscope.contract.completion import Completion
from halluscope.errors import ConfigError
from halluscope.hallulens import templates
from halluscope.hallulens.nonexistent import (
    GeneratedEntitiesConfig,
    MixedEntitiesConfig,
    build_generated_testset,
    build_mixed_testset,
    generate_generated_entities,
    generate_mixed_entities,
    medicine_pools,
    parse_names,
)
from halluscope.hallulens.search import SearchError, SearchResult
from halluscope.hallulens.sources import load_itis, load_medicines
from halluscope.storage.fs import Location


@pytest.fixture()
def tables(tmp_path):
    hierarchy, longnames, medicines = write_tables(tmp_path)
    return load_itis(str(hierarchy), str(longnames)), load_medicines(str(medicines))


def test_medicine_pools(tables):
    pools = medicine_pools(tables[1].names)
    assert pools.notes == {"medicine_names_unusable": 1}  # "Calpol, Paracetamol"
    assert EXISTING_MEDICINES <= pools.existing
    assert len(pools.patterns) == 9  # 7 two-word and 2 three-word cleaned names ("pan d capsule pr" has 4)
    assert [len(p) for p in pools.words[2]] == [7, 3]
    assert [len(p) for p in pools.words[3]] == [2, 2, 2]


def test_mixed_entities_never_emit_existing_names(tables):
    taxonomy, medicines = tables
    config = MixedEntitiesConfig(seed=7, per_domain=5)
    items, report = generate_mixed_entities(config, taxonomy, medicines)
    by_domain = {d: {i.entity for i in items if i.bin == d} for d in config.domains}
    assert by_domain["animal"] < NEW_ANIMALS and len(by_domain["animal"]) == 5
    assert by_domain["plant"] == NEW_PLANTS and by_domain["bacteria"] == NEW_BACTERIA
    assert len(by_domain["medicine"]) == 5
    for name in by_domain["medicine"]:
        assert name.lower() not in EXISTING_MEDICINES and name == name.title() and 2 <= len(name.split()) <= 3
    for item in items:
        assert item.entity.casefold() not in taxonomy.known_names
        assert item.prompt == templates.PHRASINGS[item.provenance["phrasing"]].format(
            type=item.bin, place="", name=item.entity)
    # plants and bacteria run out of new names: the bound (20 x 5 = 100 draws) stops them, reported
    assert (report.bins["plant"].made, report.bins["plant"].attempts, report.bins["plant"].stopped) == \
        (2, 100, "max_attempts")
    assert set(report.bins["plant"].rejected) == {"exists", "duplicate"}
    assert report.bins["animal"].stopped == "full" and report.bins["medicine"].stopped == "full"
    assert [b.bin for b in report.incomplete()] == ["plant", "bacteria"]
    assert report.notes["animal_species_without_sibling_genus"] == 1  # Canis lupus
    assert report.notes["bacteria_leaves_not_two_word_names"] == 1  # Escherichia coli K12
    assert report.bins["animal"].candidates == 5  # species with a sibling genus to borrow


def test_mixed_entities_cover_every_new_name_and_are_seeded(tables):
    taxonomy, medicines = tables
    items, _ = generate_mixed_entities(MixedEntitiesConfig(seed=1, per_domain=6, domains=["animal"]), taxonomy)
    assert {i.entity for i in items} == NEW_ANIMALS
    assert [i.entity for i in items] == sorted(NEW_ANIMALS, key=str.casefold)  # sorted before phrasings
    again, _ = generate_mixed_entities(MixedEntitiesConfig(seed=1, per_domain=6, domains=["animal"]), taxonomy)
    assert [i.row() for i in again] == [i.row() for i in items]
    other, _ = generate_mixed_entities(MixedEntitiesConfig(seed=2, per_domain=6, domains=["animal"]), taxonomy)
    assert {i.entity for i in other} == NEW_ANIMALS and [i.prompt for i in other] != [i.prompt for i in items]


def test_mixed_entities_need_their_tables(tables):
    with pytest.raises(ConfigError, match="medicine domain needs the medicine table"):
        generate_mixed_entities(MixedEntitiesConfig(domains=["medicine"]), tables[0])
    with pytest.raises(ConfigError, match="animal domain needs the ITIS tables"):
        generate_mixed_entities(MixedEntitiesConfig(domains=["animal"]), None, tables[1])


def test_mixed_testset_reuse(tables, tmp_path):
    taxonomy, medicines = tables
    root = Location.from_url(str(tmp_path))
    config = MixedEntitiesConfig(seed=3, per_domain=2, domains=["animal", "medicine"])
    ts = build_mixed_testset(root, config, taxonomy, medicines)
    assert set(ts.spec.sources) == {"itis_hierarchy", "itis_longnames", "medicines"}
    assert ts.counts() == {"animal": 2, "medicine": 2} and not ts.reused
    assert build_mixed_testset(root, config, taxonomy, medicines).reused


def test_a_stored_testset_anyone_could_rewrite_or_that_was_edited_is_not_reused(tables, tmp_path, caplog):
    """A test set is reused only from files of this user that no one else can write and whose
    items still hash to its id; any other is skipped with a warning and built again."""
    import json
    import os

    taxonomy, medicines = tables
    root = Location.from_url(str(tmp_path))
    config = MixedEntitiesConfig(seed=3, per_domain=2, domains=["animal", "medicine"])
    ts = build_mixed_testset(root, config, taxonomy, medicines)
    folder = tmp_path / ts.spec.task / ts.testset_id
    os.chmod(folder / "items.parquet", 0o666)
    with caplog.at_level("WARNING"):
        again = build_mixed_testset(root, config, taxonomy, medicines)
    assert not again.reused and again.testset_id == ts.testset_id  # the same items, written again
    assert "is writable by others" in caplog.text and str(folder) in caplog.text
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, "spec": {**manifest["spec"], "seed": 4}}))
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert not build_mixed_testset(root, config, taxonomy, medicines).reused
    assert "does not match its id" in caplog.text


@pytest.mark.parametrize("text, names", [
    ("Alpha Cafe, Beta Bar, Gamma Grill", ["Alpha Cafe", "Beta Bar", "Gamma Grill"]),
    ("Here are three names: 1. Alpha, 2. Beta, 3. Gamma.", ["Alpha", "Beta", "Gamma"]),
    ("1. Alpha\n2. \"Beta\"\n- Gamma", ["Alpha", "Beta", "Gamma"]),
    ("Alpha, alpha, Beta", ["Alpha", "Beta"]),
    ("", []),
])
def test_parse_names(text, names):
    assert parse_names(text, 5) == names


def brainstormer(model: str):
    """Names tagged with the model and the subject; a prompt with an "avoid" list gets other names."""
    def generate(prompts: list[str]) -> list[Completion]:
        out = []
        for p in prompts:
            n = int(re.search(r"Invent (\d+) names", p).group(1))
            subject = re.search(r"names for a (.+?)\. Each", p).group(1).title().replace(" ", "")
            avoid = re.search(r"Do not use any of these names: (.*)\.", p)
            salt = len(avoid.group(1).split(", ")) if avoid else 0
            out.append(Completion(text=", ".join(f"{model}{salt}{i} {subject}" for i in range(n))))
        return out
    return generate


def mixer(model: str):
    """Crosses the offered names' model tags, keeping the subject; for a cafe the first name is a real one
    ("Known ...") and for a drone brand its search fails ("Flaky ...")."""
    def generate(prompts: list[str]) -> list[Completion]:
        out = []
        for p in prompts:
            n = int(re.search(r"Make (\d+) new names", p).group(1))
            offered = re.search(r"Names: (.*)\n", p).group(1).split(", ")
            made = [f"{offered[i].split()[0]}{offered[-1 - i].split()[0]} {offered[i].split()[-1]}" for i in range(n)]
            if "names for a cafe" in p:
                made[0] = f"Known Cafe {model}"
            if "names for a brand of drone" in p:
                made[0] = f"Flaky Drone {model}"
            out.append(Completion(text=", ".join(made)))
        return out
    return generate


def fake_models(models: list[str]):
    brainstorms = {m: brainstormer(m) for m in models}
    mixes = {m: mixer(m) for m in models}
    calls: list[tuple[str, str, int]] = []

    def route(model):
        def generate(prompts):
            kind = "mix" if prompts[0].startswith("Below are names") else "brainstorm"
            calls.append((model, kind, len(prompts)))
            return (mixes if kind == "mix" else brainstorms)[model](prompts)
        return generate
    return {m: route(m) for m in models}, calls


class RuleSearch:
    """"Known ..." names exist (title has the name, snippet the type); "Flaky ..." searches fail."""

    def __init__(self, everything_exists: bool = False) -> None:
        self.queries: list[str] = []
        self.everything_exists = everything_exists

    def describe(self):
        return {"kind": "rule"}

    def search(self, query: str, count: int = 3) -> list[SearchResult]:
        self.queries.append(query)
        kind, name = re.match(r"(.+?) named (.+?)(?: in [A-Z].*)?$", query).groups()
        if name.startswith("Flaky"):
            raise SearchError("RATE_LIMITED")
        if name.startswith("Known") or self.everything_exists:
            return [SearchResult(f"{name} | official site", f"The best {kind} around.")]
        return [SearchResult("Something else", f"A {kind} elsewhere.")]


MODELS = ["m-a", "m-b", "m-c"]


def gen_config(**kw) -> GeneratedEntitiesConfig:
    return GeneratedEntitiesConfig(**{
        "seed": 11, "models": MODELS, "per_rotation": {"business": 4, "event": 2, "product": 2},
        "names_per_prompt": {"business": 2, "event": 2, "product": 1},
        "business_types": ["cafe", "bar"], "event_types": ["war"], "product_types": ["drone", "router"],
        "cities": {"high": ["Paris", "London"], "low": ["Ghent", "Aarhus"]},
        "countries": {"high": ["France"], "middle": ["Chile"], "low": ["Malawi"]}, **kw})


def test_generated_entities_round_robin(tmp_path):
    generators, calls = fake_models(MODELS)
    search = RuleSearch()
    items, report = generate_generated_entities(gen_config(), generators, search)
    # Places per domain: ceil(target / names per prompt / types). Business: ceil(4/2/2) = 1 city, so 2
    # combinations; 2 x 2 x 0.95 = 3.8 < 4 raises the names per prompt to 3 (5.7 >= 4). Event:
    # ceil(2/2/1) = 1 country, 1 combination, 1.9 < 2 -> 3 names. Product: ceil(2/1) = 2 types, no
    # place, 2 x 1 x 0.95 = 1.9 < 2 -> 2 names.
    assert {k: v for k, v in report.notes.items() if k.endswith("per_prompt")} == \
        {"business_names_per_prompt": 3, "event_names_per_prompt": 3, "product_names_per_prompt": 2}
    # One round: 5 combinations per rotation; brainstorm 5 x 2 x 3 = 30 prompts (one call per model),
    # mix 5 x 3 = 15 prompts (one call per model).
    assert report.rounds == 1 and report.generator_calls == 6 and report.prompts == 45
    assert sorted(calls) == [(m, k, n) for m in MODELS for k, n in (("brainstorm", 10), ("mix", 5))]
    # business: 2 x 3 names, one "Known" per rotation exists -> 5 kept, 1 trimmed; product: 2 x 2, one
    # "Flaky" search fails -> 3 kept, 1 trimmed; event: 3 kept, 1 trimmed.
    for r in range(3):
        assert report.bins[f"business/{r}"].as_dict() | {"bin": None} == {
            "bin": None, "target": 4, "made": 4, "candidates": 2, "attempts": 6, "rejected": {"exists": 1},
            "unusable": {}, "surplus": 1, "stopped": "full"}
        assert dict(report.bins[f"product/{r}"].rejected) == {"search_failed": 1}
        assert (report.bins[f"event/{r}"].made, report.bins[f"event/{r}"].surplus) == (2, 1)
    assert report.complete and len(items) == 3 * (4 + 2 + 2)
    for item in items:
        r = item.provenance["rotation"]
        assert item.bin == f"{item.fields['domain']}/{r}"
        assert item.fields["shuffle_model"] == item.provenance["mixer"] == MODELS[r]
        assert item.provenance["brainstormers"] == [MODELS[r - 2], MODELS[r - 1]]
        assert not item.entity.startswith(("Known", "Flaky"))
        place = f" in {item.fields['place']}" if item.fields["place"] else ""
        query = f"{item.fields['type']} named {item.entity}{place}"
        assert query in search.queries  # every kept name was searched
        if item.fields["domain"] == "product":
            assert "brand" in item.prompt and item.fields["place"] == ""
        else:
            assert f"{item.fields['type']} in {item.fields['place']}" in item.prompt
    assert len({i.entity for i in items}) == len(items)
    assert {i.fields["place"] for i in items if i.fields["domain"] == "event"} <= {"France", "Chile", "Malawi"}


def test_generated_entities_bounded_when_every_name_exists():
    generators, _ = fake_models(MODELS)
    items, report = generate_generated_entities(gen_config(), generators, RuleSearch(everything_exists=True))
    assert items == [] and len(report.incomplete()) == 9
    for key, b in report.bins.items():
        limit = 3 * b.target  # default bound: 3 x target names searched per bin
        assert (b.made, b.attempts, b.stopped) == (0, limit, "max_attempts"), key
    assert report.rounds >= 2  # later rounds ask for names other than those already offered


def test_generated_entities_config_and_reuse(tmp_path):
    with pytest.raises(ValueError, match="business names need places: set cities"):
        gen_config(cities={})
    with pytest.raises(ConfigError, match=r"no generation function for model\(s\) \['m-c'\]"):
        generate_generated_entities(gen_config(), {m: brainstormer(m) for m in MODELS[:2]}, RuleSearch())
    generators, calls = fake_models(MODELS)
    root = Location.from_url(str(tmp_path))
    ts = build_generated_testset(root, gen_config(), generators, RuleSearch())
    n = len(calls)
    again = build_generated_testset(root, gen_config(), generators, RuleSearch())
    assert again.reused and len(calls) == n and again.testset_id == ts.testset_id
    assert ts.spec.generator_models == MODELS and ts.spec.params["search"] == "rule"
    assert ts.counts() == {f"{d}/{r}": n for r in range(3) for d, n in (("business", 4), ("event", 2), ("product", 2))}
