"""Summarise the GEMM tile timeline CSVs of bench/results/ncu/2026-11-30-gemm-timeline.sh.

usage: gemm_timeline_summary.py DIR   (DIR holds timeline-N.csv and case-N.txt)
Per case and kernel (0 narrow, 1 wide): tiles by wgmma width with their mean time, the K loop per 64-wide K block,
the split of the consumer's loop cycles (waiting for a full stage / fragment load + dequant + wgmma issue / wgmma
wait), the epilogue, the gaps between a CTA's tiles, and the producer's share of cycles waiting for empty stages.
"""
import collections
import csv
import glob
import os
import statistics
import sys


def summarise(path):
    rows = list(csv.DictReader(open(path)))
    out = []
    for kernel in ('0', '1'):
        prods = [r for r in rows if r['kind'] == 'prod' and r['kernel'] == kernel]
        tiles = [r for r in rows if r['kind'] == 'tile' and r['kernel'] == kernel and r['wg'] == '0']
        if not prods or not tiles:
            continue
        ghz = statistics.median(int(p['full_cyc'].strip() or 0) and int(p['deq_cyc']) / (int(p['end']) - int(p['start']))
                                for p in prods)
        t0 = min(int(p['start']) for p in prods)
        t1 = max(int(p['end']) for p in prods)
        span = [(int(p['end']) - int(p['start'])) / 1e3 for p in prods]
        empty = sum(int(p['full_cyc']) for p in prods) / sum(int(p['deq_cyc']) for p in prods)
        out.append(f"  kernel {'wide' if kernel == '1' else 'narrow'}: {len(prods)} CTAs, launch span {(t1 - t0) / 1e3:.1f} us, "
                   f"CTA span median {statistics.median(span):.1f} (min {min(span):.1f}, max {max(span):.1f}) us, "
                   f"SM clock {ghz:.2f} GHz, producer waits for empty stages {100 * empty:.0f}% of its cycles")
        by_width = collections.defaultdict(list)
        for r in tiles:
            by_width[int(r['width'])].append(r)
        total_tile_us = sum((int(r['end']) - int(r['start'])) / 1e3 for r in tiles)
        for wdt in sorted(by_width):
            rs = by_width[wdt]
            dur = [(int(r['end']) - int(r['start'])) / 1e3 for r in rs]
            kbs = [int(r['kblocks']) for r in rs]
            loop = [(int(r['loop_end']) - int(r['start'])) / 1e3 / int(r['kblocks']) for r in rs if int(r['loop_end'])]
            epi = [(int(r['end']) - int(r['loop_end'])) / 1e3 for r in rs if int(r['loop_end'])]
            iss = sum(int(r.get('issue_cyc') or 0) for r in rs)
            cyc = [int(r['full_cyc']) + int(r['deq_cyc']) + int(r['mma_cyc']) + int(r.get('issue_cyc') or 0) for r in rs]
            full = sum(int(r['full_cyc']) for r in rs) / max(1, sum(cyc))
            deq = sum(int(r['deq_cyc']) for r in rs) / max(1, sum(cyc))
            mma = sum(int(r['mma_cyc']) for r in rs) / max(1, sum(cyc))
            rows_mean = statistics.mean(int(r['rows']) for r in rs)
            out.append(f"    width {wdt:3d}: {len(rs):4d} tiles ({100 * sum(dur) / total_tile_us:4.1f}% of tile time), rows mean {rows_mean:5.1f}, "
                       f"tile {statistics.median(dur):6.2f} us, K blocks {statistics.median(kbs)}, loop {1e3 * statistics.median(loop):5.0f} ns/K block, "
                       f"epilogue {statistics.median(epi):5.2f} us; loop cycles: full-wait {100 * full:3.0f}%, "
                       + (f"load+dequant {100 * deq:3.0f}%, wgmma issue {100 * iss / max(1, sum(cyc)):3.0f}%, " if iss else f"load+dequant+issue {100 * deq:3.0f}%, ")
                       + f"wgmma wait {100 * mma:3.0f}%")
        gaps = []
        by_cta = collections.defaultdict(list)
        for r in tiles:
            by_cta[r['cta']].append(r)
        for rs in by_cta.values():
            rs.sort(key=lambda r: int(r['tile']))
            gaps += [(int(b['start']) - int(a['end'])) / 1e3 for a, b in zip(rs, rs[1:])]
        if gaps:
            out.append(f"    gaps between a CTA's tiles: median {statistics.median(gaps):.2f} us, total {sum(gaps) / len(by_cta):.1f} us per CTA")
    return out


def main():
    d = sys.argv[1]
    for path in sorted(glob.glob(os.path.join(d, 'timeline-*.csv')), key=lambda p: int(p.rsplit('-', 1)[1][:-4])):
        i = path.rsplit('-', 1)[1][:-4]
        print(open(os.path.join(d, f'case-{i}.txt')).read().strip())
        print('\n'.join(summarise(path)))


if __name__ == '__main__':
    main()
