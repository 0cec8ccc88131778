"""Index streams (cxlbench.workloads.lookups): Zipf's skew against the power law's closed form, and
each reuse profile's histogram against its published points."""
import numpy as np
import pytest

from cxlbench.workloads import lookups
from cxlbench.errors import UserError


def test_zipf_rows_are_skewed_scattered_and_in_range():
    rng = np.random.default_rng(0)
    rows, n, alpha = 100_000, 400_000, 1.05
    picked = lookups.zipf(rows, n, alpha, rng)
    assert picked.min() >= 0 and picked.max() < rows
    counts = np.sort(np.bincount(picked, minlength=rows))[::-1]
    # The hottest 1 % of rows take what the continuous power law gives ranks [1, 1001) of
    # [1, rows + 1), within 2 points.
    e = 1 - alpha
    share = (1001 ** e - 1) / ((rows + 1) ** e - 1)
    assert abs(counts[:1000].sum() / n - share) < 0.02
    assert counts[0] > 20 * n / rows and np.argmax(np.bincount(picked)) != 0   # scattered
    assert np.unique(lookups.zipf(7, 1000, 0.0, rng)).size == 7


def test_a_far_share_leaves_the_other_lookups_on_a_hot_corner():
    """dist=uniform far=f (the calibration's sparse gathers): a share f over the whole
    table, the rest on its first `corner` rows; far=1 draws what uniform always drew."""
    rows, n, corner = 1 << 20, 200_000, 1024
    picked = lookups.uniform(rows, n, np.random.default_rng(3), far=0.125, corner=corner)
    assert picked.min() >= 0 and picked.max() < rows
    outside = (picked >= corner).mean()           # the far share, less its draws in the corner
    assert outside == pytest.approx(0.125 * (1 - corner / rows), abs=0.005)
    assert np.unique(picked[picked >= corner]).size > 0.9 * (picked >= corner).sum()
    plain = lookups.uniform(1000, 50, np.random.default_rng(5))
    assert (plain == np.random.default_rng(5).integers(0, 1000, 50)).all()


def test_scatter_is_a_bijection():
    rng = np.random.default_rng(1)
    for rows in (1, 2, 6, 1024, 999_983):
        assert np.unique(lookups.scatter(np.arange(rows), rows, rng)).size == rows


@pytest.mark.parametrize("profile", sorted(lookups.PROFILES))
@pytest.mark.parametrize("count", [100_000, 1_000_000])
@pytest.mark.parametrize("seed", [0, 1])
def test_reuse_stream_matches_its_profile(profile, count, seed):
    """Each bucket's share of distinct rows within half a point, its share of lookups
    within 2.5 points; the published points (rows used once, reused over 16 or 64 times,
    and the lookups those serve) follow from the buckets."""
    p = lookups.PROFILES[profile]
    stream = lookups.reuse(50_000_000, count, profile, np.random.default_rng(seed))
    assert stream.size == count and stream.min() >= 0 and stream.max() < 50_000_000
    got = lookups.reuse_histogram(stream, p.buckets)
    for b, (rows, served) in zip(p.buckets, got):
        assert abs(rows - b.rows) < 0.005, (b, rows)
        assert abs(served - b.lookups) < 0.025, (b, served)
        assert b.lo <= p.mean(b) <= b.hi
    counts = np.bincount(stream)
    counts = counts[counts > 0]
    over64 = counts > 64
    published = {"meta-2022": (0.34, 0.018, 0.52), "meta-2021": (0.47, 0.008, 0.42)}[profile]
    assert abs((counts == 1).mean() - published[0]) < 0.005
    assert abs(over64.mean() - published[1]) < 0.002
    assert abs(counts[over64].sum() / count - published[2]) < 0.025
    if profile == "meta-2022":      # 11.4 % of rows reused over 16 times serve 74 %
        over16 = counts > 16
        assert abs(over16.mean() - 0.114) < 0.005
        assert abs(counts[over16].sum() / count - 0.74) < 0.025


def test_reuse_on_a_small_table_and_an_unknown_profile():
    stream = lookups.reuse(100, 10_000, "meta-2022", np.random.default_rng(0))
    assert stream.size == 10_000 and set(np.unique(stream)) <= set(range(100))
    with pytest.raises(UserError, match="unknown reuse profile 'meta-1999'"):
        lookups.reuse(100, 10, "meta-1999", np.random.default_rng(0))


def test_scatter_stays_affine_past_int64_products():
    """A table of 6e9 rows: out(r) = out(0) + r * (out(1) - out(0)) mod rows, computed
    with Python's integers, for ranks whose product with the multiplier would pass 2^63."""
    rows = 6_000_000_001
    ranks = np.array([0, 1, 5_000_000_000, rows - 1], dtype=np.int64)
    out = lookups.scatter(ranks, rows, np.random.default_rng(3)).tolist()
    step = (out[1] - out[0]) % rows
    assert all(0 <= o < rows for o in out)
    assert [(out[0] + int(r) * step) % rows for r in ranks] == out


def test_profiles_keep_the_published_mean_reuse():
    """The mean count a distinct row is looked up ("Avg col size" in dlrm_datasets'
    locality_stats.txt): 12.7 for the 2022 traces, 6.9 for fbgemm_t856_bs65536.pt."""
    assert lookups.PROFILES["meta-2022"].mean_reuse == pytest.approx(12.7)
    assert lookups.PROFILES["meta-2021"].mean_reuse == pytest.approx(6.9)
    for p in lookups.PROFILES.values():
        assert sum(b.rows for b in p.buckets) == pytest.approx(1, abs=1e-9)
        assert sum(b.lookups for b in p.buckets) == pytest.approx(1, abs=1e-9)


def test_a_trace_splits_into_tables_with_their_own_rows(tmp_path):
    """dlrm_datasets' layout: lengths (tables x batch), offsets over every bag, indices
    from each table's row 0; a table whose bags are all empty has one row."""
    lengths = np.array([[2, 0, 1], [0, 0, 0], [3, 1, 0]])
    idx = np.array([5, 1, 7, 2, 9, 4, 8])
    np.savez(tmp_path / "t.npz", indices=idx.astype(np.int32), lengths=lengths)
    t = lookups.load_trace(str(tmp_path / "t.npz"))
    assert (t.tables, t.batch, t.rows) == (3, 3, (8, 1, 10)) and t.name == "t.npz"
    assert t.offsets.tolist() == [0, 2, 2, 3, 3, 3, 3, 6, 7, 7]
    got_idx, got_off = t.table_bags(2, 2)
    assert got_idx.tolist() == [2, 9, 4, 8] and got_off.tolist() == [0, 3, 4]
    assert lookups.load_trace(str(tmp_path / "t.npz"), rows=10).rows == (10, 10, 10)
    with pytest.raises(UserError, match=r"^trace t.npz: indices out of range: table 2 "
                                        r"looks up row 9, but rows=9$"):
        lookups.load_trace(str(tmp_path / "t.npz"), rows=9)
    np.savez(tmp_path / "flat.npz", indices=idx, offsets=t.offsets)
    assert lookups.load_trace(str(tmp_path / "flat.npz"), tables=3).rows == (8, 1, 10)
    assert lookups.load_trace(str(tmp_path / "flat.npz")).rows == (10,)     # one table
    with pytest.raises(UserError, match="9 bags do not split into 2 tables"):
        lookups.load_trace(str(tmp_path / "flat.npz"), tables=2)
