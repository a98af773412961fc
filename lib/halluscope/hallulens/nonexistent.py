"""NonExistentRefusal test sets: questions about animals, plants, bacteria, medicines, businesses,
events and products that do not exist (spec section 5).

MixedEntities recombines real names: a species epithet under a sibling genus of its own genus
(ITIS), or medicine-name words drawn by position; a name that exists anywhere in the source tables
is rejected. GeneratedEntities has three generator models take turns: two brainstorm names, the
third recombines them (so no model is asked about names it invented alone), and a web search
rejects names that exist.

Names are sorted before each gets its phrasing, and each phrasing is drawn from a generator seeded
with the test set's seed and the name, so neither set iteration order nor PYTHONHASHSEED changes a
test set (the authors' code can: spec section 2).
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from halluscope.errors import ConfigError
from halluscope.hallulens import templates
from halluscope.hallulens.generation import GenerateFn, call_generator
from halluscope.hallulens.search import SearchError, SearchProvider, SearchResult, entity_exists, entity_query
from halluscope.hallulens.sources import MedicineTable, SourceRef, Taxonomy
from halluscope.hallulens.testset import BinReport, GenerationReport, TestItem, TestSet, TestSetSpec, build_testset
from halluscope.records import stable_id
from halluscope.storage.fs import Location

MixedDomain = Literal["animal", "plant", "bacteria", "medicine"]
MIXED_DOMAINS: tuple[MixedDomain, ...] = ("animal", "plant", "bacteria", "medicine")
KINGDOMS: dict[str, str] = {"animal": "Animalia", "plant": "Plantae", "bacteria": "Bacteria"}

GeneratedDomain = Literal["business", "event", "product"]
# The HalluLens code's seed types (the paper says 6 business and 6 event types: spec section 11, item 6).
BUSINESS_TYPES = ("restaurant", "bar", "bookstore", "cafe", "museum")
EVENT_TYPES = ("war", "natural disaster", "scientific discovery", "sport event", "pandemic")
PRODUCT_TYPES = ("headphone", "watch", "camera", "shoe", "game", "glasses", "speaker", "keyboard", "chair",
                 "table", "printer", "pen", "guitar", "piano", "bike", "drone", "coffee maker", "projector", "bag",
                 "air conditioner", "bread", "microwave", "vacuum cleaner", "sewing machine", "router")
PER_ROTATION: Mapping[GeneratedDomain, int] = {"business": 300, "event": 300, "product": 50}
NAMES_PER_PROMPT: Mapping[GeneratedDomain, int] = {"business": 3, "event": 3, "product": 2}
ENTITY_MODELS = ("meta-llama/Llama-3.1-405B-Instruct-FP8", "mistralai/Mistral-Nemo-Instruct-2407", "gpt-4o")
_OVERGENERATE = 0.95  # names per prompt rise until combinations x names x 0.95 >= the target

_PARENTHETICAL = re.compile(r"\([^)]*\)")
_QUOTES = "\"'“”‘’`*"
_NUMBERING = re.compile(r"^\s*(?:[-*•]|\d{1,3}[.):])\s*")


def _phrasing(seed: int, *key: object) -> int:
    return random.Random("|".join(map(str, (seed, "phrasing", *key)))).randrange(len(templates.PHRASINGS))


# --- MixedEntities ------------------------------------------------------------------------------


class MixedEntitiesConfig(BaseModel):
    """MixedEntities (spec 5.1): 2,000 names per domain, none existing in ITIS or the medicine table."""

    model_config = ConfigDict(extra="forbid")

    seed: int = 0
    per_domain: int = Field(default=2000, gt=0)
    domains: list[MixedDomain] = Field(default_factory=lambda: list(MIXED_DOMAINS))
    max_attempts_per_domain: int | None = Field(default=None, gt=0,
                                                description="names tried per domain at most; None: 20 x per_domain")

    @property
    def attempts_limit(self) -> int:
        return self.max_attempts_per_domain or 20 * self.per_domain

    def spec(self, sources: dict[str, SourceRef]) -> TestSetSpec:
        return TestSetSpec(task="mixed_entities", seed=self.seed, bins={d: self.per_domain for d in self.domains},
                           sources=sources, max_attempts_per_bin=self.attempts_limit,
                           templates=templates.template_digests(templates.ENTITY_PHRASINGS))


@dataclass(frozen=True)
class _Species:
    tsn: int
    genus: int
    epithet: str
    other_genera: tuple[int, ...]  # siblings of the genus that have children themselves


def species_pool(taxonomy: Taxonomy, kingdom: str) -> tuple[list[_Species], Counter]:
    """Two-word species of a kingdom whose genus has a sibling genus to borrow, and why others are not."""
    roots = {tsn for tsn, top in taxonomy.kingdom.items() if tsn == top and taxonomy.names.get(tsn) == kingdom}
    pool: list[_Species] = []
    notes: Counter = Counter()
    for tsn in sorted(t for t, top in taxonomy.kingdom.items() if top in roots and t not in taxonomy.children):
        name = taxonomy.names.get(tsn, "")
        genus = taxonomy.parent.get(tsn)
        grand = taxonomy.parent.get(genus) if genus is not None else None
        if len(name.split()) != 2:
            notes["leaves_not_two_word_names"] += 1
            continue
        others = tuple(g for g in taxonomy.children.get(grand, []) if g != genus and g in taxonomy.children
                       and len(taxonomy.names.get(g, "").split()) == 1) if grand is not None else ()
        if genus is None or not others:  # no genus: no grandparent, so no others
            notes["species_without_sibling_genus"] += 1
            continue
        pool.append(_Species(tsn, genus, name.split()[1], others))
    return pool, notes


def clean_medicine(name: str) -> str | None:
    """Casefolded, parentheticals removed, words with digits dropped (strengths, "500mg"); None for a
    name with "," or "&" (combinations) or nothing left."""
    low = _PARENTHETICAL.sub(" ", name.casefold())
    if "," in low or "&" in low:
        return None
    kept = [w for w in low.split() if not any(ch.isdigit() for ch in w)]
    return " ".join(kept) or None


@dataclass
class _MedicinePools:
    existing: set[str]  # every name as written and cleaned, casefolded
    patterns: list[str]  # cleaned names of 2 or 3 words, sorted: the length of a made-up name is drawn from them
    words: dict[int, list[list[str]]]  # name length -> words seen at each position, sorted
    notes: Counter


def medicine_pools(names: list[str]) -> _MedicinePools:
    """Word pools by position. One-word names are not patterns: a one-word draw is an existing name."""
    existing = {" ".join(n.casefold().split()) for n in names}
    notes: Counter = Counter()
    cleaned: set[str] = set()
    for n in names:
        c = clean_medicine(n)
        if c is None:
            notes["medicine_names_unusable"] += 1
            continue
        cleaned.add(c)
    existing |= cleaned
    patterns = sorted(c for c in cleaned if 2 <= len(c.split()) <= 3)
    by_position: dict[int, list[set[str]]] = {2: [set(), set()], 3: [set(), set(), set()]}
    for p in patterns:
        for i, w in enumerate(p.split()):
            by_position[len(p.split())][i].add(w)
    return _MedicinePools(existing, patterns, {n: [sorted(s) for s in pos] for n, pos in by_position.items()}, notes)


def _mix_species(pool: list[_Species], taxonomy: Taxonomy, rng: random.Random) -> tuple[str, dict]:
    sp = rng.choice(pool)
    other = rng.choice(sp.other_genera)
    return (f"{taxonomy.names[other]} {sp.epithet}",
            {"source": "itis", "species_tsn": sp.tsn, "genus_tsn": sp.genus, "other_genus_tsn": other})


def _mix_medicine(pools: _MedicinePools, rng: random.Random) -> tuple[str, dict]:
    length = len(rng.choice(pools.patterns).split())
    name = " ".join(rng.choice(position) for position in pools.words[length])
    return name.title(), {"source": "medicines", "words": length}


def generate_mixed_entities(config: MixedEntitiesConfig, taxonomy: Taxonomy | None = None,
                            medicines: MedicineTable | None = None) -> tuple[list[TestItem], GenerationReport]:
    """Names per domain until full or ``attempts_limit`` names were tried; items sorted by name."""
    report = GenerationReport(bins={d: BinReport(d, config.per_domain) for d in config.domains})
    items: list[TestItem] = []
    for domain in config.domains:
        bin_report = report.bins[domain]
        if domain == "medicine":
            if medicines is None:
                raise ConfigError("mixed_entities: the medicine domain needs the medicine table")
            pools = medicine_pools(medicines.names)
            report.notes.update(pools.notes)
            known, candidates = pools.existing, len(pools.patterns)
            draw = (lambda rng, p=pools: _mix_medicine(p, rng)) if pools.patterns else None
        else:
            if taxonomy is None:
                raise ConfigError(f"mixed_entities: the {domain} domain needs the ITIS tables")
            pool, notes = species_pool(taxonomy, KINGDOMS[domain])
            report.notes.update({f"{domain}_{k}": v for k, v in notes.items()})
            known, candidates = taxonomy.known_names, len(pool)
            draw = (lambda rng, p=pool: _mix_species(p, taxonomy, rng)) if pool else None
        bin_report.candidates = candidates
        rng = random.Random(f"{config.seed}|mixed_entities|{domain}")
        made: dict[str, tuple[str, dict]] = {}
        while draw is not None and len(made) < config.per_domain and bin_report.attempts < config.attempts_limit:
            bin_report.attempts += 1
            name, origin = draw(rng)
            key = " ".join(name.casefold().split())
            if key in known:
                bin_report.rejected["exists"] += 1
            elif key in made:
                bin_report.rejected["duplicate"] += 1
            else:
                made[key] = (name, origin)
        bin_report.made = len(made)
        bin_report.stopped = ("full" if bin_report.complete else "exhausted" if draw is None else "max_attempts")
        for key in sorted(made):
            name, origin = made[key]
            phrasing = _phrasing(config.seed, "mixed_entities", domain, name)
            items.append(TestItem(
                task="mixed_entities", item_id=stable_id("mixed_entities", domain, name),
                prompt=templates.entity_prompt(phrasing, domain, name), bin=domain, entity=name,
                fields={"name": name, "type": domain, "place": ""},
                provenance={**origin, "phrasing": phrasing, "template": templates.ENTITY_PHRASINGS,
                            "seed": config.seed}))
    return items, report


def build_mixed_testset(root: Location, config: MixedEntitiesConfig, taxonomy: Taxonomy | None = None,
                        medicines: MedicineTable | None = None) -> TestSet:
    sources: dict[str, SourceRef] = {}
    if taxonomy is not None and any(d in KINGDOMS for d in config.domains):
        sources.update(zip(("itis_hierarchy", "itis_longnames"), taxonomy.refs))
    if medicines is not None and "medicine" in config.domains:
        sources["medicines"] = medicines.ref

    def make() -> tuple[list[TestItem], GenerationReport]:
        items, report = generate_mixed_entities(config, taxonomy, medicines)
        report.notes["sources"] = {name: r.report.as_dict() for name, r in
                                   (("itis", taxonomy), ("medicines", medicines)) if r is not None}
        return items, report

    return build_testset(root, config.spec(sources), make)


# --- GeneratedEntities --------------------------------------------------------------------------


class GeneratedEntitiesConfig(BaseModel):
    """GeneratedEntities (spec 5.2): per rotation of the three models, 300 business, 300 event and
    50 product names, each checked by web search. Business names are placed in cities and event
    names in countries, sampled evenly over frequency levels (the HalluLens code's lists are
    grouped low/middle/high by Google Books n-gram frequency; pass them here)."""

    model_config = ConfigDict(extra="forbid")

    seed: int = 0
    models: list[str] = Field(default_factory=lambda: list(ENTITY_MODELS), min_length=3, max_length=3)
    per_rotation: dict[GeneratedDomain, int] = Field(default_factory=lambda: dict(PER_ROTATION), min_length=1)
    names_per_prompt: dict[GeneratedDomain, int] = Field(default_factory=lambda: dict(NAMES_PER_PROMPT))
    business_types: list[str] = Field(default_factory=lambda: list(BUSINESS_TYPES), min_length=1)
    event_types: list[str] = Field(default_factory=lambda: list(EVENT_TYPES), min_length=1)
    product_types: list[str] = Field(default_factory=lambda: list(PRODUCT_TYPES), min_length=1)
    cities: dict[str, list[str]] = Field(default_factory=dict, description="frequency level -> cities")
    countries: dict[str, list[str]] = Field(default_factory=dict, description="frequency level -> countries")
    search_top_k: int = Field(default=3, gt=0)
    max_attempts_per_bin: int | None = Field(default=None, gt=0, description="names searched per domain and "
                                                                            "rotation at most; None: 3 x target")

    @model_validator(mode="after")
    def _check(self) -> GeneratedEntitiesConfig:
        if len(set(self.models)) != 3:
            raise ValueError(f"models must be three distinct model ids, got {self.models}")
        needs_places: tuple[tuple[GeneratedDomain, dict[str, list[str]]], ...] = (
            ("business", self.cities), ("event", self.countries))
        for domain, places in needs_places:
            if self.per_rotation.get(domain, 0) and not any(places.values()):
                raise ValueError(f"{domain} names need places: set {'cities' if domain == 'business' else 'countries'}")
        missing = sorted(d for d in self.per_rotation if d not in self.names_per_prompt)
        if missing or any(n <= 0 for n in (*self.per_rotation.values(), *self.names_per_prompt.values())):
            raise ValueError(f"per_rotation and names_per_prompt need positive counts for every domain ({missing})")
        return self

    def attempts_limit(self, domain: GeneratedDomain) -> int:
        return self.max_attempts_per_bin or 3 * self.per_rotation[domain]

    def bins(self) -> dict[str, int]:
        return {_bin(d, r): n for r in range(3) for d, n in self.per_rotation.items()}

    def spec(self, search_kind: str) -> TestSetSpec:
        params = self.model_dump(mode="json", exclude={"seed", "models", "max_attempts_per_bin"})
        limits = {self.attempts_limit(d) for d in self.per_rotation}
        return TestSetSpec(task="generated_entities", seed=self.seed, bins=self.bins(),
                           generator_models=list(self.models), max_attempts_per_bin=max(limits),
                           templates=templates.template_digests(templates.BRAINSTORM, templates.MIX,
                                                                templates.ENTITY_PHRASINGS),
                           params={**params, "search": search_kind,
                                   "attempts_limits": {d: self.attempts_limit(d) for d in self.per_rotation}})


def _bin(domain: str, rotation: int) -> str:
    return f"{domain}/{rotation}"


def parse_names(text: str | None, limit: int) -> list[str]:
    """Names from a comma-separated reply (newline-separated as a fallback), numbering, bullets and
    quotes removed, a leading "Here are ...:" dropped, duplicates kept once; at most ``limit``."""
    if not text or not text.strip():
        return []
    body = text.strip()
    head, sep, tail = body.partition(":")
    if sep and "\n" not in head and len(head.split()) > 2:
        body = tail  # "Here are three names: A, B, C"
    parts = body.split(",")
    if sum(1 for p in parts if p.strip()) <= 1:
        parts = body.splitlines()
    names: list[str] = []
    for part in parts:
        name = _NUMBERING.sub("", part.strip()).strip().strip(_QUOTES).strip().rstrip(".").strip()
        if name and len(name.split()) <= 8 and name.casefold() not in {n.casefold() for n in names}:
            names.append(name)
    return names[:limit]


@dataclass(frozen=True)
class _Combo:
    kind: str
    place: str | None
    level: str | None


@dataclass
class _EntityBin:
    domain: GeneratedDomain
    rotation: int
    combos: list[_Combo]
    count: int  # names asked per prompt
    report: BinReport
    kept: dict[int, list[tuple[str, int]]] = field(default_factory=dict)  # combo -> [(name, round)]
    proposed: dict[int, list[str]] = field(default_factory=dict)  # combo -> names already offered

    def total(self) -> int:
        return sum(map(len, self.kept.values()))


def _places(config: GeneratedEntitiesConfig, domain: str, wanted: int, rng: random.Random
            ) -> list[tuple[str, str]]:
    """``wanted`` (place, level) pairs: an equal share from every level, the rest from random levels."""
    levels = config.cities if domain == "business" else config.countries
    left = {lv: sorted(set(levels[lv])) for lv in sorted(levels) if levels[lv]}
    chosen: list[tuple[str, str]] = []
    share = wanted // len(left)
    for lv in list(left):
        picked = rng.sample(left[lv], min(share, len(left[lv])))
        chosen += [(p, lv) for p in picked]
        left[lv] = [p for p in left[lv] if p not in picked]
    while len(chosen) < wanted and any(left.values()):
        lv = rng.choice([lv for lv in left if left[lv]])
        place = left[lv].pop(rng.randrange(len(left[lv])))
        chosen.append((place, lv))
    return chosen


def _domain_combos(config: GeneratedEntitiesConfig, domain: GeneratedDomain) -> tuple[list[_Combo], int]:
    """The (type, place) combinations of a domain and the names to ask per prompt."""
    rng = random.Random(f"{config.seed}|generated_entities|places|{domain}")
    target, count = config.per_rotation[domain], config.names_per_prompt[domain]
    if domain == "product":
        kinds = list(config.product_types)
        kinds = [k for k in kinds if k in set(rng.sample(kinds, min(len(kinds), math.ceil(target / count))))]
        combos = [_Combo(k, None, None) for k in kinds]
    else:
        kinds = list(config.business_types if domain == "business" else config.event_types)
        places = _places(config, domain, math.ceil(target / count / len(kinds)), rng)
        combos = [_Combo(k, p, lv) for k in kinds for p, lv in places]
    while len(combos) * count * _OVERGENERATE < target:
        count += 1
    return combos, count


def _ask(jobs: list[tuple[str, str]], generators: Mapping[str, GenerateFn], step: str,
         report: GenerationReport) -> list[str | None]:
    """(model, prompt) jobs, one batched call per model; replies in job order (None on error)."""
    out: list[str | None] = [None] * len(jobs)
    for model in sorted({m for m, _ in jobs}):
        index = [i for i, (m, _) in enumerate(jobs) if m == model]
        replies = call_generator(generators[model], [jobs[i][1] for i in index], f"{step} ({model})", report)
        for i, reply in zip(index, replies):
            out[i] = None if reply.error else reply.text
    return out


def _round(bins: list[_EntityBin], round_no: int, config: GeneratedEntitiesConfig,
           generators: Mapping[str, GenerateFn], search: SearchProvider, workers: int, report: GenerationReport,
           seen: set[str]) -> None:
    jobs: list[tuple[_EntityBin, int]] = []
    for b in bins:
        need = b.report.target - b.total()
        picked: Sequence[int]
        if round_no == 1:
            picked = range(len(b.combos))
        else:
            ranked = sorted(range(len(b.combos)), key=lambda i: (len(b.kept.get(i, [])), i))
            picked = ranked[:max(1, math.ceil(need / b.count))]
        jobs += [(b, i) for i in picked]
    models = config.models
    storm = [(models[b.rotation - 2 + k], templates.brainstorm(b.combos[i].kind, b.combos[i].place, b.count,
                                                               b.domain == "product", b.proposed.get(i, [])))
             for b, i in jobs for k in (0, 1)]
    ideas = _ask(storm, generators, "entity brainstorm", report)
    mixing: list[tuple[_EntityBin, int]] = []
    mix_jobs: list[tuple[str, str]] = []
    for n, (b, i) in enumerate(jobs):
        first, second = parse_names(ideas[2 * n], b.count), parse_names(ideas[2 * n + 1], b.count)
        if not first or not second:
            b.report.unusable["brainstorm_failed"] += 1
            continue
        combo = b.combos[i]
        mixing.append((b, i))
        mix_jobs.append((models[b.rotation], templates.mix(combo.kind, combo.place, b.count, b.domain == "product",
                                                           first + second)))
    mixed = _ask(mix_jobs, generators, "entity mix", report)
    checks: list[tuple[_EntityBin, int, str]] = []
    fresh: Counter = Counter()
    for (b, i), reply in zip(mixing, mixed):
        names = parse_names(reply, b.count)
        if not names:
            b.report.unusable["mix_failed"] += 1
        for name in names:
            b.proposed.setdefault(i, []).append(name)
            key = " ".join(name.casefold().split())
            if key in seen:
                b.report.rejected["duplicate"] += 1
            elif b.report.attempts < config.attempts_limit(b.domain):
                seen.add(key)
                b.report.attempts += 1
                fresh[id(b)] += 1
                checks.append((b, i, name))
    queries = [entity_query(b.combos[i].kind, name, b.combos[i].place) for b, i, name in checks]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        answers = list(pool.map(lambda q: _search(search, q, config.search_top_k), queries))
    for (b, i, name), answer in zip(checks, answers):
        if isinstance(answer, SearchError):
            b.report.rejected["search_failed"] += 1
        elif entity_exists(answer, b.combos[i].kind, name):
            b.report.rejected["exists"] += 1
        else:
            b.kept.setdefault(i, []).append((name, round_no))
    for b in bins:
        if not fresh[id(b)] and b.total() < b.report.target:
            b.report.stopped = "max_attempts" if b.report.attempts >= config.attempts_limit(b.domain) else "exhausted"


def _search(search: SearchProvider, query: str, top_k: int) -> list[SearchResult] | SearchError:
    try:
        return search.search(query, top_k)
    except SearchError as err:
        return err


def _trim(b: _EntityBin) -> None:
    """Down to the target by taking the last name of the fullest combination, repeatedly."""
    while b.total() > b.report.target:
        fullest = max(sorted(b.kept), key=lambda i: len(b.kept[i]))
        b.kept[fullest].pop()
        b.report.surplus += 1


def generate_generated_entities(config: GeneratedEntitiesConfig, generators: Mapping[str, GenerateFn],
                                search: SearchProvider, *, search_workers: int = 1
                                ) -> tuple[list[TestItem], GenerationReport]:
    """Rounds of brainstorm -> mix -> search over all short bins (a bin = domain x rotation) until each
    is full, has searched its ``attempts_limit`` names, or a round brings it no new name."""
    absent = [m for m in config.models if m not in generators]
    if absent:
        raise ConfigError(f"generated_entities: no generation function for model(s) {absent}")
    report = GenerationReport(bins={})
    bins: list[_EntityBin] = []
    for domain in config.per_rotation:
        combos, count = _domain_combos(config, domain)
        report.notes[f"{domain}_names_per_prompt"] = count
        for rotation in range(3):
            key = _bin(domain, rotation)
            report.bins[key] = BinReport(key, config.per_rotation[domain], candidates=len(combos))
            bins.append(_EntityBin(domain, rotation, combos, count, report.bins[key]))
    seen: set[str] = set()
    while True:
        active = [b for b in bins if not b.report.stopped]
        for b in active:
            if b.total() >= b.report.target:
                b.report.stopped = "full"
            elif b.report.attempts >= config.attempts_limit(b.domain):
                b.report.stopped = "max_attempts"
        active = [b for b in active if not b.report.stopped]
        if not active:
            break
        report.rounds += 1
        _round(active, report.rounds, config, generators, search, search_workers, report, seen)
    items: list[TestItem] = []
    for b in sorted(bins, key=lambda b: (b.rotation, list(config.per_rotation).index(b.domain))):
        _trim(b)
        b.report.made = b.total()
        items += _entity_items(config, b)
    report.bins = {k: report.bins[k] for k in sorted(report.bins)}
    return items, report


def _entity_items(config: GeneratedEntitiesConfig, b: _EntityBin) -> list[TestItem]:
    mixer = config.models[b.rotation]
    brainstormers = [config.models[b.rotation - 2], config.models[b.rotation - 1]]
    out: list[TestItem] = []
    for i, combo in enumerate(b.combos):
        for name, round_no in b.kept.get(i, []):
            phrasing = _phrasing(config.seed, "generated_entities", b.domain, b.rotation, combo.kind, combo.place, name)
            out.append(TestItem(
                task="generated_entities",
                item_id=stable_id("generated_entities", b.rotation, b.domain, combo.kind, combo.place, name),
                prompt=templates.entity_prompt(phrasing, combo.kind, name, combo.place, brand=b.domain == "product"),
                bin=_bin(b.domain, b.rotation), entity=name,
                fields={"name": name, "type": combo.kind, "place": combo.place or "", "domain": b.domain,
                        "shuffle_model": mixer},
                provenance={"rotation": b.rotation, "mixer": mixer, "brainstormers": brainstormers,
                            "place_level": combo.level, "round": round_no, "phrasing": phrasing,
                            "seed": config.seed, "templates": {"brainstorm": templates.BRAINSTORM, "mix": templates.MIX,
                                                               "phrasing": templates.ENTITY_PHRASINGS}}))
    return out


def build_generated_testset(root: Location, config: GeneratedEntitiesConfig, generators: Mapping[str, GenerateFn],
                            search: SearchProvider, *, search_workers: int = 1) -> TestSet:
    spec = config.spec(str(search.describe().get("kind", type(search).__name__)))
    return build_testset(root, spec, lambda: generate_generated_entities(config, generators, search,
                                                                           search_workers=search_workers))
