import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = statistics.median
for frac in (0.01, 0.1):
    for side in ("base", "new"):
        rs = [d["res"] for d in rows if d["side"] == side and abs(d["res"]["frac"] - frac) < 1e-9]
        if not rs: continue
        f = lambda k: med(r[k] for r in rs)
        g = lambda n, k: med(r[n][k] for r in rs)
        print(f"| {frac:.0%} | {side} ({rows[[d['side'] for d in rows].index(side)]['commit']}) | {len(rs)} | {f('tuples_ratio'):.2f}x | **{f('rate_ratio_cpu'):.2f}x** ({', '.join('%.2f' % r['rate_ratio_cpu'] for r in rs)}) | {f('rate_ratio_cpu_median_step'):.2f}x | **{f('c_loop_same_w_cpu'):.2f}x** ({', '.join('%.2f' % r['c_loop_same_w_cpu'] for r in rs)}) | {f('c_loop_same_w_cpu_median_step'):.2f}x | {f('rate_ratio_wall'):.2f}x / {f('c_loop_same_w_wall'):.2f}x | {g('ssbj','c_loop_cpu_ms'):.2f} / {g('meshjoin','c_loop_cpu_ms'):.2f} / {g('meshjoin_same_w','c_loop_cpu_ms'):.2f} | {g('ssbj','rate_cpu')/1e3:.0f}k / {g('meshjoin','rate_cpu')/1e3:.0f}k | {max(r['ssbj']['peak_over_budget'] for r in rs):.3f} / {max(r['meshjoin']['peak_over_budget'] for r in rs):.3f} | {min(r['load_start'][0] for r in rs):.0f}-{max(r['load_end'][0] for r in rs):.0f} |")
