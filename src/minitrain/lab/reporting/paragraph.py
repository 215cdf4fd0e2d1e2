"""Stop condition 4 on content, not wording: do a lesson paragraph's numbers and verdict agree with the manifest?

A paragraph passes when it states, in the learner's own words and units, the tokens/s of 1 and of 2
processes, the 2-vs-1 ratio (the median of the repeats' paired ratios, or speedup_2proc, the median
repeats' tokens/s ratio) and the lowest and highest repeat's ratio, the all-reduce's share of a 2-process
step (in the median repeat or any other), and the verdict the repeats give and no other one, in at most 180 words. Every
ratio ("1.18x", "1.18 times", "a speedup of 1.18"), percentage ("18% faster", "12% of the step") and
token rate ("46,850 tok/s", "47k tokens per second") it states must be one of the manifest's figures or
one derived from them (per repeat, per phase, per rank, inverted, the ideal 2x), rounded to the digits
it is written with. A claim about one repeat or the medians ("in 2 of 3 repeats") is not the verdict.

What no number check can judge is why: a paragraph with every number right and a false cause
appended ("Switching to NCCL would make 2 processes twice as fast.") passes here. That is what the
teacher's rubric is for (solutions/rubric-paragraph.md).
"""

import math
import re
from dataclasses import dataclass

from minitrain.lab.reporting.manifest import Manifest

MAX_WORDS = 180

# --- the numbers a paragraph states -------------------------------------------------------------
NUMBER = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(?:\s*(k|K|thousand)\b)?")
RATIO = re.compile(r"\s*[x×](?!\w)(?!\s*\d)|\s*-?fold\b|\s+times(?=\s+(?:as|faster|slower|more|longer|the|that|"
                   r"higher|lower|its|their|1|one|a)\b)")
PERCENT = re.compile(r"\s*(?:%|percent\b|per cent\b)")
# "18% faster", "12% more throughput": a ratio as a gain or a loss
GAIN_AFTER = re.compile(r"\s+(?:faster|slower|quicker|ahead|behind|more|less|fewer|higher|lower|better|worse|longer|"
                        r"shorter|gain|"
                        r"loss|speed-?up|slow-?down|improvement|increase|decrease|drop)\b")
GAIN_BEFORE = re.compile(r"(?:faster|slower|higher|lower|more|less|better|worse|speed-?up|slow-?down|gain|improvement|"
                         r"increase|decrease|drop)\s+(?:of|by)\s+(?:about\s+|roughly\s+|around\s+|~\s*)?$", re.I)
TOKENS = re.compile(r"\s*(?:tokens?|tok)\s*(?:/\s*s(?:ec)?\b|per\s+s(?:ec(?:ond)?)?\b|a\s+second\b|each\s+second\b)",
                    re.I)
NOT_JUDGED = re.compile(r"\s*(?:ms|s|sec|seconds|MB|KB|GB|MiB|KiB|bytes|params|parameters|sentences|sequences|steps|"
                        r"words|lines|threads?|cores?|CPUs?|logical|ranks?|process(?:es)?|repeats?|runs?|buckets?|"
                        r"M|million|"
                        r"tokens(?!\s*(?:/|per|a second|each second)))\b", re.I)
# a bare number read as a share by the words around it ("share of 0.115", "0.12 of a step"), or as a ratio
# when it is a decimal in a sentence about ratios ("a speedup of 1.18 (1.12 to 1.29 over the repeats)")
RATIO_TOPIC = re.compile(r"speed-?up|ratio|factor|\d\s*[x×](?!\w)|\btimes\b", re.I)
SHARE_BEFORE = re.compile(r"\bshare\b[^\d;!?]{0,30}$", re.I)
SHARE_AFTER = re.compile(r"\s+of\s+(?:a|the|each|every|its)\b[^.;]{0,30}\bstep", re.I)
RANGE_JOIN = re.compile(r"\s*[x×%]?\s*(?:-|–|—|to|and)\s*")  # "0.96-1.17x", "0.96x to 1.17x", "0.96 and 1.17x"
SENTENCE = re.compile(r"(?:[^.!?]|[.!?](?=\d)|\.(?=\s*[a-z]))+[.!?]?")  # a decimal point does not end a sentence
TOKEN_TOPIC = re.compile(r"\btok(?:en)?s?\b|\bthroughput\b", re.I)


@dataclass(frozen=True)
class Claim:
    """A number the paragraph states: its kind (ratio, gain, percent, tokens), value, last stated digit, words."""

    kind: str
    value: float
    unit: float
    text: str

    def matches(self, true: float) -> bool:
        """Right at the precision it is written in: `true` rounded to the claim's last digit. A ratio's
        last digit is 0.1 at most ("1x" reads as "1.0x")."""
        unit = min(self.unit, 0.1) if self.kind == "ratio" else self.unit
        return abs(self.value - true) <= 0.5 * unit + 1e-9 * max(1.0, abs(true))

    def rounded(self, true: float) -> str:
        """`true` written to the claim's precision, as the claim writes it."""
        unit = min(self.unit, 0.1) if self.kind == "ratio" else self.unit
        decimals = max(0, -round(math.log10(unit)))
        return shown(self.kind, round(true / unit) * unit, decimals)


def shown(kind: str, value: float, decimals: int | None = None) -> str:
    """A figure as a paragraph would write it."""
    if kind == "tokens":
        return f"{value:,.{decimals or 0}f} tokens/s"
    if kind == "ratio":
        return f"{value:.{2 if decimals is None else decimals}f}x"
    return f"{value:.{(0 if value >= 10 else 1) if decimals is None else decimals}f}%"


def unit_of(text: str, n: re.Match) -> tuple[str | None, re.Match | None]:
    """A number's kind by the unit written after it, and the unit's match; (None, None) if it has none."""
    if unit := RATIO.match(text, n.end()):
        return "ratio", unit
    if unit := PERCENT.match(text, n.end()):
        before = text[max(0, n.start() - 40):n.start()]
        return ("gain" if GAIN_AFTER.match(text, unit.end()) or GAIN_BEFORE.search(before) else "percent"), unit
    if unit := TOKENS.match(text, n.end()):
        return "tokens", unit
    return ("not judged" if NOT_JUDGED.match(text, n.end()) else None), None


def kind_by_context(text: str, n: re.Match, sentence: str, before: str) -> str | None:
    """A bare number's kind by the words around it (its sentence; for a count, also the one `before` it:
    "2 processes: 55.4k tokens/s. 1 process: 46.9k."): a share, a ratio or a token rate; None if not judged."""
    digits = n[1].replace(",", "")
    value = float(digits) * (1000 if n[2] else 1)
    if value < 1 and (SHARE_BEFORE.search(text[max(0, n.start() - 40):n.start()]) or SHARE_AFTER.match(text, n.end())):
        return "share"  # "0.115 of a 2-process step": a percentage written as a fraction
    if "." in digits and not n[2] and value < 10 and RATIO_TOPIC.search(sentence):
        return "ratio"
    counted = n[2] or "," in n[1]  # "46.9k", "46,850": a count, read with the sentence before too
    return "tokens" if value >= 100 and TOKEN_TOPIC.search((before if counted else "") + sentence) else None


def claims(text: str) -> list[Claim]:
    """The ratios, gains ("6% faster"), other percentages and token rates a paragraph states, in order."""
    numbers = list(NUMBER.finditer(text))
    read = [unit_of(text, n) for n in numbers]
    kinds = [kind for kind, _ in read]
    for i in range(len(numbers) - 2, -1, -1):  # a range's ends share a unit: "1.12-1.29x", "12% to 29% faster"
        if RANGE_JOIN.fullmatch(text, numbers[i].end(), numbers[i + 1].start()):
            pair = {kinds[i], kinds[i + 1]}
            kinds[i] = kinds[i + 1] if kinds[i] is None or pair == {"percent", "gain"} else kinds[i]
    sentences = [""] + [s[0] for s in SENTENCE.finditer(text)]
    ends = [0] + [s.end() for s in SENTENCE.finditer(text)]
    found = []
    for n, (_, unit), kind in zip(numbers, read, kinds):
        digits, scale = n[1].replace(",", ""), 1000 if n[2] else 1
        value = float(digits) * scale
        if kind is None:
            i = next(i for i in range(1, len(ends)) if n.start() < ends[i])
            kind = kind_by_context(text, n, sentences[i], sentences[i - 1])
        if kind in (None, "not judged"):
            continue
        if "." in digits:
            last = 10.0 ** -len(digits.split(".")[1])
        else:  # "41,000 tokens/s" is stated to the thousand; "10%" and "2x" to the unit
            last = 10.0 ** (len(digits) - len(digits.rstrip("0"))) if kind == "tokens" else 1.0
        written = (text[n.start():unit.end()] if unit else n[0]).strip()
        if kind == "share":
            kind, value, last = "percent", 100 * value, 100 * last
        found.append(Claim(kind, value, last * scale, written))
    return found


# --- the manifest's figures ----------------------------------------------------------------------
def required(m: Manifest) -> dict[str, list[tuple[str, float]]]:
    """The figures a paragraph must state, by manifest field, each in the kinds and values it may take."""
    lo, hi = m.speedup_2proc_range

    def ratio(r: float) -> list[tuple[str, float]]:  # "1.18x", "0.85x" the other way, "18% faster", "118% of"
        return [("ratio", r), ("ratio", 1 / r), ("gain", 100 * abs(r - 1)), ("gain", 100 * abs(1 - 1 / r)),
                ("percent", 100 * r)]

    # the 2-vs-1 ratio either way: the median repeats' tokens/s ratio (speedup_2proc) or the median of the
    # paired ratios (the statistic the range is of); the share in the median repeat or in any other repeat
    return {"tokens_per_sec_1proc": [("tokens", m.tokens_per_sec_1proc)],
            "tokens_per_sec_2proc": [("tokens", m.tokens_per_sec_2proc)],
            "speedup_2proc": ratio(m.speedup_2proc) + ratio(m.paired_speedup()), "speedup_2proc_range low": ratio(lo),
            "speedup_2proc_range high": ratio(hi),
            "allreduce_share_of_step": [("percent", 100 * s) for s in [m.allreduce_share_of_step, *m.allreduce_shares()]]}


def figures(m: Manifest) -> dict[str, dict[str, float]]:
    """Every figure a paragraph may state, by kind and name: the required ones and the ones derived from them."""
    known: dict[str, dict[str, float]] = {"ratio": {}, "gain": {}, "percent": {}, "tokens": {}}
    for name, forms in required(m).items():
        for i, (kind, value) in enumerate(forms):
            known[kind].setdefault(f"{name} ({i})", value)
    phases, steps = m.step_breakdown_ms, {"1proc": m.step_p50_ms_1proc, "2proc": m.step_p50_ms_2proc}
    ratios = {"step_p50_ms_2proc / step_p50_ms_1proc": steps["2proc"] / steps["1proc"], "the ideal 2x": 2.0,
              "parity, 1x": 1.0}
    ratios |= {f"repeats.speedups[{i}]": r for i, r in enumerate(m.repeats["speedups"])}
    ratios |= {f"step_breakdown_ms {phase}, 2 over 1": phases["2proc"][phase] / ms
               for phase, ms in phases["1proc"].items() if ms > 0}
    for name, r in ratios.items():
        known["ratio"] |= {name: r, f"1 / {name}": 1 / r}
        known["gain"] |= {name: 100 * abs(r - 1), f"1 / {name}": 100 * abs(1 - 1 / r)}
        known["percent"][name] = 100 * r
    known["percent"] |= {f"step_breakdown_ms.{key}.{phase} over the step": 100 * ms / steps[key]
                         for key in phases for phase, ms in phases[key].items()}
    known["tokens"] |= {"tokens_per_sec_2proc per rank": m.tokens_per_sec_2proc / 2,
                        "twice tokens_per_sec_1proc (the ideal)": 2 * m.tokens_per_sec_1proc}
    known["tokens"] |= {f"repeats.{n}[{i}].tokens_per_sec": r["tokens_per_sec"]
                        for n in ("1proc", "2proc") for i, r in enumerate(m.repeats[n])}
    return known


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


def expected(kind: str, m: Manifest) -> str:
    """The manifest's required figures of one kind, as a learner reads them in notebook 06."""
    (lo, hi), r = m.speedup_2proc_range, m.speedup_2proc
    if kind == "tokens":
        return (f"the manifest's figures are tokens_per_sec_1proc {m.tokens_per_sec_1proc:,.0f} and "
                f"tokens_per_sec_2proc {m.tokens_per_sec_2proc:,.0f}")
    if kind == "ratio":
        return (f"the manifest's ratios are the repeats' median {m.paired_speedup():.2f} (speedup_2proc, of the "
                f"median repeats: {r:.2f}) and speedup_2proc_range {lo:.2f}-{hi:.2f}")
    if kind == "gain":
        way = "faster" if r >= 1 else "slower"
        return (f"the manifest's speedup_2proc {r:.2f} is {100 * abs(r - 1):.0f}% {way} and speedup_2proc_range "
                f"{lo:.2f}-{hi:.2f} is {100 * (lo - 1):+.0f}% to {100 * (hi - 1):+.0f}%")
    share, shares = m.allreduce_share_of_step, m.allreduce_shares()
    spread = f"; the repeats' shares run {100 * min(shares):.1f}-{100 * max(shares):.1f}%" if shares else ""
    return f"the manifest's allreduce_share_of_step is {share:.3f} ({shown('percent', 100 * share)}){spread}"


def missing_figure(name: str, m: Manifest) -> str:
    """The problem of a required figure the paragraph does not state, with an example that states it."""
    lo, hi = m.speedup_2proc_range
    field, value, example = {
        "tokens_per_sec_1proc": ("tokens_per_sec_1proc", f"{m.tokens_per_sec_1proc:,.0f}",
                                 f"1 process: {m.tokens_per_sec_1proc:,.0f} tokens/s"),
        "tokens_per_sec_2proc": ("tokens_per_sec_2proc", f"{m.tokens_per_sec_2proc:,.0f}",
                                 f"2 processes: {m.tokens_per_sec_2proc:,.0f} tokens/s"),
        "speedup_2proc": ("the median 2-vs-1 ratio", f"{m.paired_speedup():.2f} over the repeats' pairs, or "
                          f"speedup_2proc {m.speedup_2proc:.2f}", f"{m.paired_speedup():.2f}x, the repeats' median"),
        "allreduce_share_of_step": ("allreduce_share_of_step", f"{m.allreduce_share_of_step:.3f}",
                                    f"the all-reduce took {100 * m.allreduce_share_of_step:.0f}% of a 2-process step"),
    }.get(name, ("speedup_2proc_range", f"{lo:.2f}-{hi:.2f}", f"repeats {lo:.2f}-{hi:.2f}x"))
    return f'the paragraph does not state {field} ({value}): add it, e.g. "{example}"'


def number_problems(text: str, m: Manifest) -> list[str]:
    """Each number that is not the manifest's (with what it should be), then each required figure not stated."""
    found, known, wanted = claims(text), figures(m), required(m)
    missing = [name for name in wanted if name not in stated_figures(wanted, found)]
    problems = []
    for claim in found:
        if any(claim.matches(v) for v in known[claim.kind].values()):
            continue
        near = [(name, v) for name, forms in wanted.items() for kind, v in forms if kind == claim.kind]
        name, value = min(near, key=lambda item: abs(item[1] - claim.value))
        if absorbed := [n for n, _ in sorted(near, key=lambda item: abs(item[1] - claim.value)) if n in missing]:
            missing.remove(absorbed[0])  # the wrong number stands for a figure not stated: one problem, not two
        slip = (f" ({name.split()[0]} is {claim.rounded(value)} to the digits you wrote)"
                if abs(value - claim.value) <= 2 * claim.unit else "")  # a rounding slip: show the right rounding
        problems.append(f'the paragraph states "{claim.text}"; {expected(claim.kind, m)}: correct it{slip}')
    return problems + list(dict.fromkeys(missing_figure(name, m) for name in missing))  # the range's ends: one


# --- the verdict a paragraph states --------------------------------------------------------------
N2, N1 = r"(?:2|two)", r"(?:1|one|a\s+single|single)"
PROCESS = r"(?:DDP\s+)?(?:process(?:es)?|procs?|ranks?|workers?)"
RUN = r"(?:[\s-](?:run|runs|setup|set-up|version|case|side|configuration|config|training|job|DDP|baseline))?"
MODIFIER = r"(?:\s*\([^)]{0,40}\))?(?:\s+(?:with|on|using|at)\s+[\w,./-]+(?:\s+[\w,./-]+){0,2}?)?"


def subject(n: str) -> str:
    """'2 processes', 'the 2-process run', 'DDP with 2 ranks', 'the single process', ...: who a claim is about."""
    return (rf"(?:\b(?:the\s+)?{n}[\s-]{PROCESS}{RUN}|\bDDP\s+(?:with|on|across|over|using)\s+{n}\s+"
            rf"(?:processes|ranks)){MODIFIER}")


BE = (r"\s+(?:were|was|are|is|ran|trained|came\s+out|comes?\s+out|ended\s+up|turned\s+out|proved|performed|finished)"
      r"(?:\s+to\s+be)?(?:\s+(?:clearly|consistently|reliably|slightly|somewhat|a\s+little|a\s+bit|much|"
      r"significantly|noticeably|always|still|actually|indeed|overall|measurably|about|roughly|around|nearly|only|"
      r"just|~))*(?:\s*~?\d[\d,.]*\s*(?:[x×%]|percent|times)?)?")
UP = r"(?:faster|quicker|ahead|the\s+winner|the\s+faster(?:\s+one)?|better|superior)"
DOWN = r"(?:slower|behind|the\s+loser|the\s+slower(?:\s+one)?|worse)"
WON = (r"(?:beat|beats|won|wins|win|outperformed|outperforms|outperform|outpaced|outpaces|outran|outruns|edged\s+out|"
       r"came\s+out\s+(?:ahead|on\s+top)|pulled\s+ahead|led|leads|had\s+(?:a\s+)?(?:higher|greater|better|more)\s+"
       r"(?:total\s+)?(?:throughput|tokens?\s*(?:/|per)))")
LOST = (r"(?:lost|loses|lose|lagged|lags|trailed|trails|fell\s+behind|falls\s+behind|came\s+out\s+behind|"
        r"underperformed|(?:was|were)\s+(?:beaten|outperformed|outpaced)|had\s+(?:a\s+)?(?:lower|less|worse)\s+"
        r"(?:total\s+)?(?:throughput|tokens?\s*(?:/|per)))")
ADVERB = r"(?:\s+(?:clearly|consistently|reliably|narrowly|easily|comfortably|slightly|always|actually|indeed))*"


def wins(who: str) -> str:
    return rf"{who}(?:{BE}\s+{UP}\b|{ADVERB}\s+{WON}\b)"


def loses(who: str) -> str:
    return rf"{who}(?:{BE}\s+{DOWN}\b|{ADVERB}\s+{LOST}\b)"


VERDICT_WORD = (r"(?:\bverdict\b[^.;:\w]{0,3}(?:\w+\s+){0,3}?(?:is|was|:|=|-|–|—)|\bcall\s+it)"
                r"(?:\s+(?:clearly|simply|plainly|therefore|thus|then))?\s*[\"'“‘]?")
FAVOURED = r"\bfavou?r(?:ed|s)?\s+"  # "every repeat favoured two processes"
CLAIMS = {  # verdict -> the ways a statement claims it
    "faster": re.compile(rf"{wins(subject(N2))}|{loses(subject(N1))}|{VERDICT_WORD}faster\b|{FAVOURED}{subject(N2)}",
                         re.I),
    "slower": re.compile(rf"{loses(subject(N2))}|{wins(subject(N1))}|{VERDICT_WORD}slower\b|{FAVOURED}{subject(N1)}",
                         re.I),
    "no clear winner": re.compile(
        r"\bno\s+(?:clear\s+)?winner\b|\btoo\s+close\s+to\s+call\b|\binconclusive\b|\bindistinguishable\b|"
        r"\b(?:a\s+)?(?:tie|draw)\b|\b(?:cannot|can't|can\s+not|could\s+not|couldn't)\s+(?:\w+\s+)?(?:tell|separate|"
        r"distinguish)\b|\b(?:within|inside)\s+(?:the\s+)?(?:run-to-run\s+)?(?:spread|noise|variation|error)\b|"
        r"\bneither\b[^.;]{0,40}\b(?:faster|slower|ahead|won|the\s+winner)\b|"
        r"\bno\s+(?:clear|significant|consistent|reliable|measurable|real)\s+"
        r"(?:difference|speed-?up|winner|gain|advantage)\b|\b(?:ranges?|repeats|spreads?|intervals?)\s+(?:clearly\s+)?"
        r"overlap(?:ped|s)?\b|\boverlapping\s+(?:ranges|repeats)\b|\bstraddl|\bnot\s+(?:clearly|reliably|significantly|"
        r"consistently|measurably)\s+(?:faster|slower|better|worse)\b", re.I),
}
# a statement about some repeats, the medians, a guess or a condition is not the verdict; "every repeat" is
QUALIFIED = re.compile(
    r"\bin\s+\w+\s+of\s+(?:the\s+)?(?:\w+\s+)?(?:repeats|runs|pairs)\b|"
    r"\b(?:one|a\s+single|some|most|1)\s+(?:of\s+the\s+)?"
    r"(?:\w+\s+)?(?:repeats?|runs?|pairs?)\b|\bthe\s+(?:first|second|third|last|fastest|slowest|best|worst)\s+"
    r"(?:\w+\s+)?(?:repeat|run|pair)\b|\b(?:repeat|run|pair)\s+#?\d\b|\b(?:at|by|in|on|for)\s+(?:the\s+)?medians?\b|"
    r"\bmedian\s+(?:repeats?|runs?|pairs?)\b|\bonce\b|\bsometimes\b|\bwould\b|\bcould\b|\bmight\b|\bshould\b|"
    r"\b(?:with|given|assuming)\s+no\b|^\W*(?:if|when|whenever|unless)\b", re.I)
CONDITION = re.compile(r"\s*,?\s*(?:only\s+)?(?:if|when|whenever|while|as\s+long\s+as|unless|provided)\b", re.I)
UNIVERSAL = re.compile(r"\b(?:every|each|all|both)\s+(?:of\s+the\s+)?(?:\w+\s+)?(?:repeats?|runs?|pairs?)\b|"
                       r"\beven\s+the\s+(?:worst|slowest|fastest|best|lowest|highest|closest)\b", re.I)
PARENTHESIS = re.compile(r"\([^()]*\)")
STATEMENT_END = re.compile(r"(?<!verdict)(?<!verdict is)[;:]|\s[-–—]\s|—|"
                           r",?\s+(?:but|so|whereas|although|though|yet|hence|thus|and\s+so)\b|,\s+"
                           r"(?:and|while|which)\b", re.I)


def statements(text: str) -> list[str]:
    """The paragraph's statements: each sentence cut at ;, :, dashes and conjunctions, each parenthesis
    one of its own (the text around it stays one, so "X beat Y (0.67x), in one repeat" keeps its qualifier)."""
    found = []
    for sentence in SENTENCE.findall(text):
        while inner := PARENTHESIS.findall(sentence):
            found += [part for p in inner for part in STATEMENT_END.split(p[1:-1])]
            sentence = PARENTHESIS.sub(" ", sentence)
        found += STATEMENT_END.split(sentence)
    return found


def stated_verdicts(text: str) -> dict[str, str]:
    """Verdict -> the words that state it, for each verdict the paragraph states as its own."""
    stated: dict[str, str] = {}
    for part in statements(text):
        if QUALIFIED.search(part) and not UNIVERSAL.search(part):
            continue
        for verdict, pattern in CLAIMS.items():
            for hit in pattern.finditer(part):
                if not CONDITION.match(part, hit.end()):  # "2 processes win while ...": a rule, not a result
                    stated.setdefault(verdict, " ".join(hit[0].split()))
    return stated


EXAMPLES = {"faster": '"2 processes were faster than 1"', "slower": '"2 processes were slower than 1"',
            "no clear winner": '"there is no clear winner: the repeats overlap"'}


def verdict_problems(text: str, m: Manifest) -> list[str]:
    """A verdict the repeats contradict, named with the repeats' ranges; or no verdict at all."""
    said = stated_verdicts(text)
    tps = {n: [r["tokens_per_sec"] for r in m.repeats[f"{n}proc"]] for n in (1, 2)}
    basis = (f'the repeats give "{m.verdict}" (1 process {min(tps[1]):,.0f}-{max(tps[1]):,.0f} tokens/s, '
             f"2 processes {min(tps[2]):,.0f}-{max(tps[2]):,.0f})")
    fix = f"write e.g. {EXAMPLES[m.verdict]}"
    problems = [f'the paragraph says "{words}", but {basis}: {fix}, and say "in one repeat" or "at the median" '
                "when you mean one" for verdict, words in said.items() if verdict != m.verdict]
    if not said:
        problems.append(f"no sentence states the verdict; {basis}: {fix} (a claim about one repeat or the medians "
                        "is not the verdict)")
    return problems


def paragraph_problems(text: str, m: Manifest) -> list[str]:
    """What is wrong with a lesson paragraph against the manifest, one problem a line naming its fix; [] if nothing."""
    if not isinstance(text, str) or not text.strip():
        return [f"lesson_notes is {text!r}, not a paragraph: write it in notebook 06's Block G cell"]
    problems = number_problems(text, m) + verdict_problems(text, m)
    words = len(text.split())
    if words > MAX_WORDS:
        problems.append(f"the paragraph has {words} words; the sheet asks for one paragraph of at most {MAX_WORDS}: "
                        "cut it")
    return problems
