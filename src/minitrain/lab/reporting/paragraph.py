"""Stop condition 4 on content, not wording: do a lesson paragraph's numbers and verdict agree with the manifest?

A paragraph passes when it states, in any words, the tokens/s of 1 and of 2 processes, the median
2-vs-1 ratio and the lowest and highest repeat's ratio (as "1.06x", or as "6% faster"), the
all-reduce's share of a 2-process step (as "7%"), the verdict the repeats give and no other one,
in at most 180 words. Every ratio ("x", "times as"), percentage and token count it states must be
one of the manifest's figures or one derived from them (per repeat, per phase, per rank, the ideal
2x), at the precision it is written in: "1.1x", "about 1.06x", "41,000 tokens/s" or "41k" for
41,234, "7%" or "6.8%" for 6.82%. Claims about single repeats or medians ("faster in 2 of 3
repeats") are not read as the verdict.

What no number check can judge is why: a paragraph with every number right and a false cause
appended ("Switching to NCCL would make 2 processes twice as fast.") passes here. That is what the
teacher's rubric is for (solutions/rubric-paragraph.md).
"""

import re
from dataclasses import dataclass

from minitrain.lab.reporting.manifest import Manifest

MAX_WORDS = 180
NUMBER = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(?:\s*(k|K|thousand)\b)?")
RATIO = re.compile(r"\s*[x×](?!\w)(?!\s*\d)|\s+times(?=\s+(?:as|faster|slower|more|longer|the|that)\b)")
PERCENT = re.compile(r"\s*(?:%|percent\b|per cent\b)")
GAIN = re.compile(r"\s+(?:faster|slower|more|less|fewer|higher|lower|better|worse|longer|shorter|gain|loss|speed-?up|"
                  r"slow-?down)\b")  # "6% faster": a ratio as a gain or a loss
TOKENS = re.compile(r"\s*tokens?\s*(?:/\s*s|/\s*sec|per second|a second)\b")
NOT_TOKENS = re.compile(r"\s*(?:ms|s|seconds|MB|KB|GB|MiB|KiB|bytes|params|parameters|sentences|steps|words|lines|"
                        r"tokens(?!\s*(?:/|per|a second)))\b")
SENTENCE = re.compile(r"(?:[^.!?]|[.!?](?=\d))+[.!?]?")  # a decimal point does not end a sentence
RANGE_JOIN = re.compile(r"\s*[x×]?\s*(?:-|–|—|to|and)\s*")  # "0.96-1.17x", "0.96x to 1.17x", "between 0.96 and 1.17x"
SUBJECT2, SUBJECT1 = r"(?:2|two)\s+(?:DDP\s+)?(?:processes|ranks)", r"(?:1|one|a single|the single)\s+process"
BE = r"(?:were|was|are|is|ran|trained|came out|ended up)(?:\s+(?:clearly|consistently|reliably|slightly|somewhat|" \
     r"a little|a bit|much|significantly|noticeably|always|still|actually))?"
CLAIMS = {  # verdict -> the ways a paragraph states it
    "faster": re.compile(rf"\b{SUBJECT2}\s+{BE}\s+(?:faster|quicker|ahead)\b|\b{SUBJECT2}\s+(?:won|beat)\b|"
                         rf"\b{SUBJECT1}\s+{BE}\s+slower\b", re.IGNORECASE),
    "slower": re.compile(rf"\b{SUBJECT2}\s+{BE}\s+(?:slower|behind)\b|\b{SUBJECT2}\s+lost\b|"
                         rf"\b{SUBJECT1}\s+{BE}\s+faster\b|\b{SUBJECT1}\s+(?:won|beat)\b", re.IGNORECASE),
    "no clear winner": re.compile(
        r"\bno clear winner\b|\b(?:cannot|can't|can not|could not|couldn't)\s+(?:\w+\s+)?(?:tell|separate|distinguish)\b|"
        r"\bwithin the (?:spread|noise|variation)\b|\btoo close to call\b|\binconclusive\b|\bneither\s+(?:clearly\s+)?"
        r"faster\s+nor\s+slower\b|\bno (?:clear|significant|consistent|reliable|measurable) (?:difference|speed-?up|"
        r"winner|gain)\b|\b(?:ranges|repeats) overlap\b|\bstraddl|\bnot (?:clearly|reliably|significantly|"
        r"consistently) (?:faster|slower)\b", re.IGNORECASE),
}
CLAUSE_END = re.compile(r"[,;:()!?]|\.(?!\d)")
# a claim about some repeats or the medians, not the verdict: "in 2 of 3 repeats", "in one repeat", "at the median"
QUALIFIED = re.compile(r"\bin \w+ of (?:the )?\w+\b|\b(?:one|two|some|most|a|the first|the second|the last) repeats?\b|"
                       r"\bmedian", re.IGNORECASE)


@dataclass(frozen=True)
class Claim:
    """A number the paragraph states: its kind (ratio, gain, percent, tokens), value, last stated digit, words."""

    kind: str
    value: float
    unit: float
    text: str

    def matches(self, true: float) -> bool:
        """Right at the precision it is written in: rounded (half a unit of its last digit), or cut off
        (a whole unit, within 5%). A ratio's unit is 0.1 at most ("1x" reads as "1.0x"); rounded
        tokens/s stay within 10%; a percentage is within one unit."""
        ratio_unit = min(self.unit, 0.1)
        tolerance = {"ratio": max(0.5 * ratio_unit, min(ratio_unit, 0.05 * abs(true))),
                     "tokens": max(min(0.5 * self.unit, 0.1 * true), min(max(self.unit, 0.005 * true), 0.05 * true)),
                     "percent": self.unit, "gain": self.unit}[self.kind]
        return abs(self.value - true) <= tolerance + 1e-9


def shown(kind: str, value: float) -> str:
    percent = f"{value:.0f}%" if value >= 1 else f"{value:.1f}%"
    return {"ratio": f"{value:.2f}x", "percent": percent, "gain": percent, "tokens": f"{value:,.0f} tokens/s"}[kind]


def claims(text: str) -> list[Claim]:
    """The ratios, gains ("6% faster"), other percentages and token counts a paragraph states, in order."""
    numbers = list(NUMBER.finditer(text))
    units = [RATIO.match(text, n.end()) or PERCENT.match(text, n.end()) for n in numbers]
    kinds: list[str | None] = [None if u is None else "ratio" if u.re is RATIO else
                               "gain" if GAIN.match(text, u.end()) else "percent" for u in units]
    other = [bool(NOT_TOKENS.match(text, n.end())) for n in numbers]  # ms, MB, params, ...: not judged
    for i in range(len(numbers) - 2, -1, -1):  # the first number of a range takes the second's unit
        if kinds[i] is None and not other[i] and RANGE_JOIN.fullmatch(text, numbers[i].end(), numbers[i + 1].start()):
            kinds[i], other[i] = kinds[i + 1], other[i + 1]
    token_sentences = [s.span() for s in SENTENCE.finditer(text) if "token" in s[0].lower()]
    found = []
    for n, unit, kind, not_tokens in zip(numbers, units, kinds, other):
        digits, scale = n[1].replace(",", ""), 1000 if n[2] else 1
        value = float(digits) * scale
        if kind is None and not not_tokens and (TOKENS.match(text, n.end()) or value >= 100 and any(
                a <= n.start() < b for a, b in token_sentences)):
            kind = "tokens"  # "802 tokens/s", or "against 30,947 for 1 process" where tokens/s are the topic
        if kind is None:
            continue
        if "." in digits:
            last = 10.0 ** -len(digits.split(".")[1])
        else:  # "41,000 tokens/s" is stated to the thousand; "10%" and "2x" to the unit
            last = 10.0 ** (len(digits) - len(digits.rstrip("0"))) if kind == "tokens" else 1.0
        written = text[n.start():unit.end()] if unit else n[0] + {"ratio": "x", "tokens": ""}.get(kind, "%")
        found.append(Claim(kind, value, last * scale, written.strip()))
    return found


def figures(m: Manifest) -> dict[str, dict[str, float]]:
    """Every figure a paragraph may state, by kind and label: the manifest's and the ones derived from it."""
    lo, hi = m.speedup_2proc_range
    step_ratio = m.step_p50_ms_2proc / m.step_p50_ms_1proc
    ratios = {"median 2-vs-1 ratio": m.speedup_2proc, "lowest repeat's ratio": lo, "highest repeat's ratio": hi,
              "2-process step over the 1-process step": step_ratio, "ideal 2-vs-1 ratio": 2.0}
    ratios |= {f"repeat {i + 1}'s ratio": r for i, r in enumerate(m.repeats["speedups"])}
    phases = m.step_breakdown_ms
    ratios |= {f"{phase} of a 2-process step over a 1-process one": phases["2proc"][phase] / ms
               for phase, ms in phases["1proc"].items() if ms > 0}
    gains = {f"{name} as a gain or loss": 100 * abs(value - 1) for name, value in ratios.items()}
    percents = {"all-reduce share of a 2-process step": 100 * m.allreduce_share_of_step}
    steps = {"1proc": m.step_p50_ms_1proc, "2proc": m.step_p50_ms_2proc}
    percents |= {f"{phase}'s share of a {key[0]}-process step": 100 * ms / steps[key]
                 for key in phases for phase, ms in phases[key].items()}
    tokens = {"tokens/s of 1 process": m.tokens_per_sec_1proc, "tokens/s of 2 processes": m.tokens_per_sec_2proc,
              "tokens/s of each of 2 ranks": m.tokens_per_sec_2proc / 2, "ideal tokens/s of 2 processes":
              2 * m.tokens_per_sec_1proc}
    tokens |= {f"tokens/s of {n[0]}-process repeat {i + 1}": r["tokens_per_sec"]
               for n in ("1proc", "2proc") for i, r in enumerate(m.repeats[n])}
    return {"ratio": ratios, "gain": gains, "percent": percents, "tokens": tokens}


def required(m: Manifest) -> dict[str, list[tuple[str, float]]]:
    """The figures a paragraph must state, each in the kinds it may take."""
    lo, hi = m.speedup_2proc_range
    as_ratio = {"median 2-vs-1 ratio": m.speedup_2proc, "lowest repeat's ratio": lo, "highest repeat's ratio": hi}
    return {"tokens/s of 1 process": [("tokens", m.tokens_per_sec_1proc)],
            "tokens/s of 2 processes": [("tokens", m.tokens_per_sec_2proc)],
            **{name: [("ratio", r), ("gain", 100 * abs(r - 1))] for name, r in as_ratio.items()},
            "all-reduce share of a 2-process step": [("percent", 100 * m.allreduce_share_of_step)]}


def stated_figures(wanted: dict[str, list[tuple[str, float]]], found: list[Claim]) -> set[str]:
    """The wanted figures the claims state, each by a claim of its own (a maximum matching: one claim
    never counts for two figures)."""
    owner: dict[int, str] = {}

    def place(name: str, seen: set[int]) -> bool:
        for i, claim in enumerate(found):
            if i not in seen and any(claim.kind == kind and claim.matches(v) for kind, v in wanted[name]):
                seen.add(i)
                if i not in owner or place(owner[i], seen):
                    owner[i] = name
                    return True
        return False

    for name in wanted:
        place(name, set())
    return set(owner.values())


def stated_verdicts(text: str) -> dict[str, str]:
    """Verdict -> the words that state it, for each verdict the paragraph states."""
    stated: dict[str, str] = {}
    for verdict, pattern in CLAIMS.items():
        for hit in pattern.finditer(text):
            clause = CLAUSE_END.split(text[:hit.start()])[-1] + CLAUSE_END.split(text[hit.start():])[0]
            if verdict == "no clear winner" or not QUALIFIED.search(clause):
                stated.setdefault(verdict, hit[0])
    return stated


def paragraph_problems(text: str, m: Manifest) -> list[str]:
    """What is wrong with a lesson paragraph against the manifest, one named problem each; [] if nothing."""
    if not isinstance(text, str) or not text.strip():
        return [f"lesson_notes is {text!r}, not a paragraph"]
    problems = []
    found, known, wanted = claims(text), figures(m), required(m)
    stated = stated_figures(wanted, found)
    missing = [name for name in wanted if name not in stated]
    for claim in found:
        if any(claim.matches(v) for v in known[claim.kind].values()):
            continue
        same_kind = [name for name in missing if any(kind == claim.kind for kind, _ in wanted[name])]
        if same_kind:
            name = same_kind[0]
            missing.remove(name)
            value = next(v for kind, v in wanted[name] if kind == claim.kind)
            problems.append(f"the paragraph says {claim.text}, the manifest's {name} is {shown(claim.kind, value)}")
        else:
            name, value = min(known[claim.kind].items(), key=lambda item: abs(item[1] - claim.value))
            problems.append(f"the paragraph says {claim.text}, none of the manifest's figures "
                            f"(nearest: the {name}, {shown(claim.kind, value)})")
    problems += [f"the paragraph does not state the {name} ({shown(*wanted[name][0])})" for name in missing]
    said = stated_verdicts(text)
    tps = {n: [r["tokens_per_sec"] for r in m.repeats[f"{n}proc"]] for n in (1, 2)}
    basis = (f"the repeats give {m.verdict!r} (1 process {min(tps[1]):,.0f}-{max(tps[1]):,.0f} tokens/s, "
             f"2 processes {min(tps[2]):,.0f}-{max(tps[2]):,.0f})")
    problems += [f"the paragraph says {words!r}, {basis}" for verdict, words in said.items() if verdict != m.verdict]
    if m.verdict not in said:
        problems.append(f"the paragraph does not state the verdict: {basis}")
    words = len(text.split())
    if words > MAX_WORDS:
        problems.append(f"the paragraph has {words} words; the sheet asks for one paragraph (at most {MAX_WORDS})")
    return problems
