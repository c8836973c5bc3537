#!/usr/bin/env python3
"""Compare two profiles made by bench/profile-e2e.sh: CPU-ms per GiB relayed
by where the samples fell (share of samples x the run's CPU-s/GiB), grouped
into rough categories, then the symbols whose cost grew most from A to B.

    python3 bench/profile-diff.py A_DIR B_DIR

A_DIR and B_DIR are bench/results/<date>-profile-e2e-NAME directories (their
e2e.log gives CPU-s/GiB, report-full.txt the flat profile). The categories
are regular expressions over symbol names; a symbol takes the first that
matches, else "weft" (weft's own code) or "other-k" / "other-." (kernel /
user space).
"""
import re
import sys

CATEGORIES = {
    "sched": r"switch|schedule|_raw_spin_unlock|irqentry|idle|pick_next|update_"
    r"|enqueue_task|dequeue|try_to_wake|ttwu|select_task|__wake|futex|hrtimer",
    "epoll": r"ep_|epoll",
    "tcp": r"tcp|skb|ip_|__dev|net_|sock|inet|copy_(from|to)_iter|__sys_|loopback"
    r"|netif|nf_|raw_|release_sock|lock_sock|sk_|kfree|kmem|__alloc|page"
    r"|clear_page|__check",
    "syscall": r"syscall|entry_SYSCALL|fdget|__fget|do_sys|exit_to_user",
    "aes-ctr": r"Aes128|aes::|ctr",
    "gcm": r"gcm|ghash",
    "memmove": r"memmove|memcpy",
    "ssl": r"ssl|SSL|ossl|OPENSSL|WPACKET|tls|BIO|EVP|CRYPTO",
}


def load(d):
    """(CPU-s/GiB, {(kind, symbol): CPU-ms/GiB}) of one profile directory."""
    with open(d + "/e2e.log") as f:
        runs = re.findall(r"\[e2e\] weft: .*?, ([0-9.]+) CPU-s/GiB", f.read())
    if not runs:
        sys.exit(f"{d}/e2e.log has no weft result")
    cpu_per_gib = float(runs[-1])
    syms = {}
    with open(d + "/report-full.txt") as f:
        for line in f:
            m = re.match(r"\s+([0-9.]+)%\s+\[(.)\]\s+(.*?)\s{2,}", line)
            if m:
                key = (m.group(2), m.group(3)[:90])
                syms[key] = float(m.group(1)) / 100 * cpu_per_gib * 1000
    return cpu_per_gib, syms


def category(key):
    for name, pattern in CATEGORIES.items():
        if re.search(pattern, key[1]):
            return name
    return "weft" if "weft" in key[1] else "other-" + key[0]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    a, sa = load(sys.argv[1])
    b, sb = load(sys.argv[2])
    print(f"A {a} CPU-s/GiB, B {b} CPU-s/GiB; CPU-ms/GiB: A, B, B - A")
    ca, cb = {}, {}
    for syms, acc in ((sa, ca), (sb, cb)):
        for k, v in syms.items():
            acc[category(k)] = acc.get(category(k), 0) + v
    for c in sorted(set(ca) | set(cb), key=lambda c: -(cb.get(c, 0) - ca.get(c, 0))):
        print(f"{c:12} {ca.get(c, 0):7.0f} {cb.get(c, 0):7.0f} {cb.get(c, 0) - ca.get(c, 0):+7.0f}")
    print("--- symbols whose cost grew most (A, B, B - A)")
    keys = set(sa) | set(sb)
    for k in sorted(keys, key=lambda k: -(sb.get(k, 0) - sa.get(k, 0)))[:25]:
        print(f"{sa.get(k, 0):6.0f} {sb.get(k, 0):6.0f} {sb.get(k, 0) - sa.get(k, 0):+6.0f} {k[0]} {k[1]}")


if __name__ == "__main__":
    main()
