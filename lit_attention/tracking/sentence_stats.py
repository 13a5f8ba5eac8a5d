"""Sentence-level sufficient statistics of BLEU and chrF, computed once per run and split.

A corpus score is a function of column sums of per-sentence statistics, so a bootstrap resample
is a weighted sum (resample counts @ statistics) and never re-reads or re-tokenizes a sentence.
Both metrics use sacreBLEU's defaults, the ones `lit-attention test` reports:

    BLEU  [N, 10]  hyp_len, ref_len, correct_1..4, total_1..4 (tokenizer 13a, mixed case, exp smoothing)
    chrF  [N, 18]  (hyp, ref, match) character n-gram counts for n = 1..6 (beta 2, no word n-grams)

They are cached in the run store as hyps/<split>.<metric>.stats.npz (computed when a metric is
first asked for), keyed by a hash of the hypotheses, the references and the metric's sacreBLEU
signature: a changed file is recomputed, never read stale. Scores from summed statistics equal
sacrebleu.corpus_bleu / corpus_chrf exactly (tests/analysis/test_sentence_stats.py checks it on
Multi30k).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from itertools import repeat
from pathlib import Path

import numpy as np
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.metrics.helpers import extract_all_char_ngrams

from lit_attention import metric_facts
from lit_attention.files import atomic_write
from lit_attention.threads import allowed_cores
from lit_attention.tracking.schema import hyps_file, refs_file, split_lines, stats_cache_file

MAX_NGRAM = 4        # BLEU
CHAR_ORDER = 6       # chrF
BETA = 2
FORMAT = 1           # bump when the layout of the cached arrays changes
METRICS = metric_facts.SENTENCE_LEVEL
WIDTH = {"bleu": 2 + 2 * MAX_NGRAM, "chrf": 3 * CHAR_ORDER}     # statistics per sentence


@lru_cache(maxsize=1)
def signatures() -> dict[str, str]:
    """sacreBLEU signatures of the two metrics, e.g. nrefs:1|case:mixed|eff:no|tok:13a|..."""
    bleu, chrf = BLEU(), CHRF()
    assert chrf.char_order == CHAR_ORDER and chrf.word_order == 0 and chrf.beta == BETA
    assert bleu.max_ngram_order == MAX_NGRAM and bleu.smooth_method == "exp"
    for metric in (bleu, chrf):
        metric.corpus_score(["a"], [["a"]])   # a signature needs the number of references set
    return {"bleu": str(bleu.get_signature()), "chrf": str(chrf.get_signature())}


# ---- statistics of one corpus -----------------------------------------------------------------

def _matches(hyp: Counter, ref: Counter) -> int:
    """sum over n-grams of min(hypothesis count, reference count): clipped matches."""
    return sum(map(min, hyp.values(), map(ref.get, hyp.keys(), repeat(0))))


def _bleu_row(hyp: tuple[list[Counter], int], ref: tuple[list[Counter], int]) -> list[int]:
    (hyp_ngrams, hyp_len), (ref_ngrams, ref_len) = hyp, ref
    return [hyp_len, ref_len, *(_matches(h, r) for h, r in zip(hyp_ngrams, ref_ngrams)),
            *(max(0, hyp_len - n) for n in range(MAX_NGRAM))]   # correct, total by order


def _chrf_row(hyp_ngrams: list[Counter], ref_ngrams: list[Counter]) -> list[int]:
    # sacreBLEU counts no hypothesis n-grams of an order the reference does not have
    return [count for hyp, ref in zip(hyp_ngrams, ref_ngrams)
            for count in (hyp.total() if ref else 0, ref.total(), _matches(hyp, ref))]


ROWS = {"bleu": _bleu_row, "chrf": _chrf_row}


class Extractor:
    """Computes statistics sentence by sentence, remembering the n-grams of references (shared by
    every run of a study) and the (metric, hypothesis, reference) triples already seen, which runs
    of one sweep repeat often."""

    def __init__(self, max_pairs: int = 200_000):   # ~100 MB of remembered pairs at most
        self.tokenize = BLEU().tokenizer   # sacreBLEU's default, 13a (as `signatures` says)
        self.ref_ngrams = lru_cache(maxsize=None)(self.ngrams)
        self.row = lru_cache(maxsize=max_pairs)(self._row)

    def ngrams(self, metric: str, text: str):
        """chrF's character n-grams of a sentence by order, or BLEU's word n-grams by order (as
        sacreBLEU's extract_all_word_ngrams) and the word count."""
        if metric == "chrf":
            return extract_all_char_ngrams(text, CHAR_ORDER)
        words = self.tokenize(text.rstrip()).split()
        orders = range(1, MAX_NGRAM + 1)
        return [Counter(zip(*(words[i:] for i in range(n)))) for n in orders], len(words)

    def _row(self, metric: str, hyp: str, ref: str) -> list[int]:
        """One sentence's statistics for `metric` (`row`, remembered)."""
        return ROWS[metric](self.ngrams(metric, hyp), self.ref_ngrams(metric, ref))

    def corpus(self, hyps: list[str], refs: list[str], metrics=METRICS) -> dict[str, np.ndarray]:
        """{metric: statistics [N, K] (int64)} of aligned hypotheses and references."""
        if len(hyps) != len(refs):
            raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references (a paired "
                             "test needs equal lengths)")
        return {m: np.array([self.row(m, h, r) for h, r in zip(hyps, refs)],
                            dtype=np.int64).reshape(len(hyps), WIDTH[m]) for m in metrics}


def corpus_stats(hyps: list[str], refs: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """BLEU [N, 10] and chrF [N, 18] sentence statistics (a fresh Extractor)."""
    found = Extractor().corpus(hyps, refs)
    return found["bleu"], found["chrf"]


# ---- scores from summed statistics -------------------------------------------------------------

def bleu_score(sums) -> float:
    """Corpus BLEU of column sums [10] (sacreBLEU's own BLEU.compute_bleu)."""
    sums = [int(x) for x in sums]
    return BLEU.compute_bleu(correct=sums[2:2 + MAX_NGRAM], total=sums[2 + MAX_NGRAM:],
                             sys_len=sums[0], ref_len=sums[1], smooth_method="exp").score


def bleu_scores(sums: np.ndarray) -> np.ndarray:
    """BLEU of many sum vectors at once: [..., 10] -> [...] (float64).

    sacreBLEU's BLEU.compute_bleu (exp smoothing) elementwise; agrees with it to a few ulps:
    where every order has a match, the geometric mean of the precisions 100 c_n / t_n is taken
    as a fourth root of their product, one column at a time; other sums go step by step."""
    sums = np.asarray(sums)
    if sums.dtype not in (np.float32, np.float64):
        sums = sums.astype(np.float64)
    sys_len, ref_len = sums[..., 0], sums[..., 1]
    c = [sums[..., 2 + n] for n in range(MAX_NGRAM)]
    t = [sums[..., 2 + MAX_NGRAM + n] for n in range(MAX_NGRAM)]
    f64 = np.float64          # float32 sums (exact integers) are widened column by column
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = np.multiply(c[0], c[1], dtype=f64) * np.multiply(c[2], c[3], dtype=f64)
        ratio /= np.multiply(t[0], t[1], dtype=f64) * np.multiply(t[2], t[3], dtype=f64)
        score = np.asarray(np.sqrt(np.sqrt(1e8 * ratio)))                 # 100 ** 4 = 1e8
        score *= np.exp(np.minimum(0.0, 1 - np.divide(ref_len, sys_len, dtype=f64)))   # brevity
    usual = (c[0] > 0) & (c[1] > 0) & (c[2] > 0) & (c[3] > 0)       # then every total > 0 too
    if not usual.all():
        score[~usual] = _bleu_scores_smoothed(sums[~usual].astype(f64))
    return score


def _bleu_scores_smoothed(sums: np.ndarray) -> np.ndarray:
    """compute_bleu step by step, for sums where some order has no match (exp smoothing, and
    the stop at an order with no n-grams at all)."""
    sys_len, ref_len = sums[..., 0], sums[..., 1]
    correct, total = sums[..., 2:2 + MAX_NGRAM], sums[..., 2 + MAX_NGRAM:]
    with np.errstate(divide="ignore", invalid="ignore"):
        bp = np.where(sys_len < ref_len,
                      np.where(sys_len > 0, np.exp(1 - ref_len / sys_len), 0.0), 1.0)
        smooth = np.ones_like(sys_len)
        stopped = np.zeros(sys_len.shape, dtype=bool)    # compute_bleu breaks at a zero total
        log_sum = np.zeros_like(sys_len)
        for n in range(MAX_NGRAM):
            c, t = correct[..., n], total[..., n]
            stopped |= t == 0
            missed = (c == 0) & ~stopped
            smooth = np.where(missed, smooth * 2, smooth)
            precision = np.where(stopped, 0.0, np.where(c == 0, 100. / (smooth * t), 100. * c / t))
            log_sum = log_sum + np.where(precision == 0, -9999999999.0, np.log(precision))
        score = bp * np.exp(log_sum / MAX_NGRAM)
    return np.where(correct.any(axis=-1), score, 0.0)


def chrf_scores(sums: np.ndarray) -> np.ndarray:
    """chrF of many sum vectors at once: [..., 18] -> [...] (float64).

    sacreBLEU's CHRF._compute_f_score (default effective-order averaging) operation by operation
    (the orders' precisions and recalls summed in order), so each value equals sacreBLEU's to the
    last bit."""
    sums = np.asarray(sums, dtype=np.float64)          # float32 sums: exact integers, widened
    n_hyp, n_ref, n_match = sums[..., 0::3], sums[..., 1::3], sums[..., 2::3]   # [..., order]
    counted = (n_hyp > 0) & (n_ref > 0)
    order = counted.sum(axis=-1)
    factor = BETA ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        precisions = np.where(counted, n_match / n_hyp, 0.0).sum(axis=-1)
        recalls = np.where(counted, n_match / n_ref, 0.0).sum(axis=-1)
        avg_prec = np.where(order > 0, precisions / order, 0.0)
        avg_rec = np.where(order > 0, recalls / order, 0.0)
        score = (1 + factor) * avg_prec * avg_rec / ((factor * avg_prec) + avg_rec)
    return np.where(avg_prec + avg_rec != 0, 100 * score, 0.0)


SCORES = {"bleu": bleu_scores, "chrf": chrf_scores}     # vectorized: [..., K] -> [...]
# the exact corpus score of one sum vector (chrf_scores is chrF's exact score already)
SCORE = {"bleu": bleu_score, "chrf": lambda sums: float(chrf_scores(np.asarray(sums)))}


def corpus_score(metric: str, stats: np.ndarray) -> float:
    """The corpus score of sentence statistics [N, K] (their column sums)."""
    return SCORE[metric](stats.sum(axis=0))


# ---- the cache in the run store ----------------------------------------------------------------

@dataclass
class SentenceStats:
    """One run's statistics on one split; `hyps_hash`/`refs_hash` identify the texts. A metric
    not asked for when reading the cache is None."""
    bleu: np.ndarray | None      # [N, 10] int64
    chrf: np.ndarray | None      # [N, 18] int64
    hyps_hash: str
    refs_hash: str

    def __len__(self) -> int:
        return len(self.bleu if self.bleu is not None else self.chrf)

    def of(self, metric: str) -> np.ndarray:
        """The statistics of ``metric`` (one its reader asked for)."""
        return getattr(self, metric)


def cache_path(run_dir: Path | str, split: str, metric: str) -> Path:
    return Path(run_dir) / stats_cache_file(split, metric)


def load_or_compute(run_dir: Path | str, split: str = "test", refs: bytes | None = None,
                    extractor: Extractor | None = None, metrics=METRICS) -> SentenceStats:
    """The `metrics` statistics of hyps/<split>.txt against `refs` (raw bytes of a reference file;
    by default the run's own hyps/<split>.ref.txt), each read from its cache file
    hyps/<split>.<metric>.stats.npz when the key matches, else computed and cached. A run store
    that cannot be written to is only read.

    Raises FileNotFoundError when the hypotheses (or the references) are missing."""
    hyps_data = (Path(run_dir) / hyps_file(split)).read_bytes()
    if refs is None:
        ref_path = Path(run_dir) / refs_file(split)
        if not ref_path.is_file():
            raise FileNotFoundError(f"{ref_path} (no references stored for {split})")
        refs = ref_path.read_bytes()
    hyps_hash, refs_hash = (hashlib.blake2b(text, digest_size=16).hexdigest()
                            for text in (hyps_data, refs))
    found = {}
    for metric in metrics:
        key = f"format:{FORMAT}|{metric}:{signatures()[metric]}|hyps:{hyps_hash}|refs:{refs_hash}"
        path = cache_path(run_dir, split, metric)
        # the cached statistics if the file holds them under `key` (not: missing, stale, foreign)
        with contextlib.suppress(OSError, KeyError, ValueError, EOFError), np.load(
                path, allow_pickle=False) as npz:
            found[metric] = npz["stats"].astype(np.int64) if str(npz["key"]) == key else None
        if found.get(metric) is None:   # the texts' lines as load.read_hyps reads them
            texts = (split_lines(data.decode("utf-8")) for data in (hyps_data, refs))
            extractor = extractor or Extractor()
            stats = found[metric] = extractor.corpus(*texts, [metric])[metric]
            buf = io.BytesIO()
            np.savez(buf, key=np.array(key),
                     stats=stats.astype(np.int32 if stats.max(initial=0) < 2 ** 31 else np.int64))
            # a read-only store (results/ under version control): not cached
            with contextlib.suppress(OSError):
                atomic_write(path, buf.getvalue())
    return SentenceStats(found.get("bleu"), found.get("chrf"), hyps_hash, refs_hash)


# ---- filling many caches at once ---------------------------------------------------------------

def probably_cached(run_dir: Path | str, split: str, refs_path: Path | str, metrics=METRICS) -> bool:
    """Cache files newer than the texts: likely valid (load_or_compute still checks the hash)."""
    try:
        texts = Path(run_dir) / hyps_file(split)
        newest = max(texts.stat().st_mtime_ns, Path(refs_path).stat().st_mtime_ns)
        return all(cache_path(run_dir, split, m).stat().st_mtime_ns >= newest for m in metrics)
    except OSError:
        return False


def _fill(job: tuple[str, str, str, tuple]) -> None:
    run_dir, split, refs_path, metrics = job
    # a problem here is met again, and reported, by the caller when it loads the run
    with contextlib.suppress(OSError, ValueError):
        load_or_compute(run_dir, split, Path(refs_path).read_bytes(), _worker_extractor(), metrics)


_worker_extractor = lru_cache(maxsize=1)(Extractor)   # one per worker process, across its jobs


def fill_caches(jobs: list[tuple[str, str, str, tuple]], workers: int | None = None,
                min_jobs: int = 16) -> int:
    """Compute the statistics of (run_dir, split, references file, metrics) jobs whose cache is
    missing or older than the texts, in `workers` processes (default: the usable CPUs). Returns
    how many it computed."""
    todo = [job for job in jobs if not probably_cached(*job)]
    workers = workers or allowed_cores()
    if len(todo) >= min_jobs and workers >= 2:   # else computed on demand by load_or_compute
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool
        # no worker processes here (e.g. a caller without a __main__ guard): computed on demand
        with (contextlib.suppress(BrokenProcessPool, OSError, RuntimeError),
              ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool):
            list(pool.map(_fill, todo, chunksize=4))
    return len(todo)
