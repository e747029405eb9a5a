#!/usr/bin/env python3
"""Search for sm90 code-word layouts (src/format/sm90_fragment.hpp): the fewest instructions that turn one 32-bit
word of 8 E2M1 codes into the four bf16x2 registers of a k16 step, each register's halves holding sign at bit 15
and e1 e0 m at bits 8..6 (mask 0x81C081C0).

Model: a register is the OR of one or more pieces, each piece a view of the word ANDed with a mask. Views: the
word itself (free), a left shift (an IMAD on the FMA pipe), a right shift or a rotation (SHF, integer ALU), or a
byte permute (PRMT, integer ALU); a view computed once serves every register that uses it. Cost = views + pieces
(one LOP3 per piece: the first masks, each further one masks and ORs). The layout (where each code bit sits in the
word) is free, so a choice of views per register is feasible iff its target bits can be matched one to one to the
word's 32 bits (bipartite matching).

   scripts/sm90_code_layout_search.py --library     the library's layout: its cost, and that it is feasible
   scripts/sm90_code_layout_search.py --max-cost 8  every layout at 8 or fewer: none (about 7 minutes)
Prints the cheapest layouts found, by cost and integer-ALU count. --max-cost 9 is out of reach of this
exhaustive form (hours); the library's 9 is shown feasible by --library."""
import argparse
import itertools

TARGET = [6, 7, 8, 15, 22, 23, 24, 31]  # bit positions of the mask 0x81C081C0


def views():
    out = [("id", 0)]
    out += [(kind, r) for kind in ("shl", "shr", "rot") for r in range(1, 32)]
    seen = set()
    for sel in itertools.product(range(4), repeat=4):
        pre = frozenset(8 * sel[b // 8] + b % 8 for b in TARGET)
        if len(pre) == 8 and sel != (0, 1, 2, 3) and pre not in seen:
            seen.add(pre)
            out.append(("prmt", sel))
    return out


def source(view, b):
    """The word bit that lands on target bit b through the view, or None."""
    kind, r = view
    if kind == "id":
        return b
    if kind == "shl":
        return b - r if b >= r else None
    if kind == "shr":
        return b + r if b + r < 32 else None
    if kind == "rot":
        return (b - r) % 32
    return 8 * r[b // 8] + b % 8


def matchable(regs):
    """regs: four tuples of views. True when the 32 target bits match distinct word bits."""
    adj = [[s for v in reg for s in [source(v, b)] if s is not None] for reg in regs for b in TARGET]
    owner = {}

    def augment(u, seen):
        for s in adj[u]:
            if s not in seen:
                seen.add(s)
                if s not in owner or augment(owner[s], seen):
                    owner[s] = u
                    return True
        return False

    return all(augment(u, set()) for u in range(32))


def search(max_cost):
    found = []
    all_views = views()
    free, paid = all_views[0], all_views[1:]
    for n_views in range(0, max_cost - 3):
        for chosen in itertools.combinations(paid, n_views):
            usable = (free,) + chosen
            pieces_left = max_cost - n_views
            subsets = [c for k in range(1, min(3, pieces_left - 3) + 1) for c in itertools.combinations(usable, k)]
            for regs in itertools.combinations_with_replacement(subsets, 4):
                pieces = sum(len(r) for r in regs)
                if pieces > pieces_left or not set(chosen) <= set().union(*regs):
                    continue
                if matchable(regs):
                    integer_alu = pieces + sum(1 for v in chosen if v[0] != "shl")
                    found.append((n_views + pieces, integer_alu, regs))
    return found


# pair_bf16x2_bits (src/format/sm90_fragment.hpp): pairs 0..3.
LIBRARY = ((("id", 0),), (("shl", 6),), (("rot", 12),), (("shl", 2), ("shr", 6)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-cost", type=int, default=8)
    ap.add_argument("--library", action="store_true")
    args = ap.parse_args()
    if args.library:
        paid = {v for reg in LIBRARY for v in reg if v[0] != "id"}
        pieces = sum(len(reg) for reg in LIBRARY)
        print(f"library layout: {len(paid) + pieces} instructions per word "
              f"({pieces + sum(1 for v in paid if v[0] != 'shl')} integer ALU), feasible: {matchable(LIBRARY)}")
        return
    found = search(args.max_cost)
    if not found:
        print(f"no layout at {args.max_cost} instructions per word or fewer")
        return
    print(f"cheapest: {min(f[0] for f in found)} instructions per word")
    for cost, integer_alu, regs in sorted(found)[:8]:
        print(f"  {cost} ({integer_alu} integer ALU): " + "; ".join(" | ".join(f"{k}{r}" for k, r in reg) for reg in regs))


if __name__ == "__main__":
    main()
