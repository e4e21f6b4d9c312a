"""Write N Debezium JSON events (MySQL envelope, no schema block) over K keys into F files.

Deterministic for a seed. Events of a key are spread over files in arrival order that does not
match their positions, with a share of updates, deletes and re-inserts, as a CDC landing looks.

    python benchmarks/generate_debezium.py --events 1000000 --keys 100000 --files 8 --out /tmp/dbz
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

T0 = 1_700_000_000_000


def generate(out: Path, events: int, keys: int, files: int, seed: int = 7, delete_share: float = 0.05) -> dict:
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    handles = [open(out / f"part-{i:05d}.json", "w", encoding="utf-8") for i in range(files)]
    alive: set[int] = set()
    counts = {"insert": 0, "update": 0, "delete": 0}
    try:
        for n in range(events):
            key = rng.randrange(keys)
            ts = T0 + n * 10
            if key in alive and rng.random() < delete_share:
                op, after = "d", None
                alive.discard(key)
                counts["delete"] += 1
            else:
                op = "u" if key in alive else "c"
                counts["update" if op == "u" else "insert"] += 1
                alive.add(key)
                after = {
                    "id": key,
                    "name": f"customer-{key}",
                    "email": f"c{key}@example.com",
                    "balance": round(rng.random() * 10000, 2),
                    "visits": n % 1000,
                    "active": bool(n % 2),
                }
            before = {"id": key} if op != "c" else None
            record = {
                "schema": {},
                "payload": {
                    "op": op,
                    "ts_ms": ts + 3,
                    "before": before,
                    "after": after,
                    "source": {"db": "shop", "table": "customers", "ts_ms": ts, "file": "mysql-bin.000001",
                               "pos": 4 + n * 100, "row": 0},
                },
            }
            # Land on a random file: arrival order is not position order.
            handles[rng.randrange(files)].write(json.dumps(record, separators=(",", ":")) + "\n")
    finally:
        for h in handles:
            h.close()
    return {"events": events, "keys": keys, "files": files, "rows": len(alive), **counts}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    print(json.dumps(generate(Path(args.out), args.events, args.keys, args.files, args.seed)))


if __name__ == "__main__":
    main()
