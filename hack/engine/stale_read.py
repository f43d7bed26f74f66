"""Sends long-prefix prompts to a running SGLang server greedily and prints the outputs as JSON.

    python stale_read.py --url http://127.0.0.1:31000 --prompts 4 --words 96 [--flush]

--flush first drops the server's L1 and L2 (POST /flush_cache), so a prefix the server has
seen before can only come back from L3. The prompts are the same for the same --seed.
"""
import argparse
import json
import random
import sys
import time
import urllib.request


def post(url, body=None):
    data = json.dumps(body).encode() if body is not None else b""
    req = urllib.request.Request(url, data=data, method="POST", headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        raw = r.read()
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--words", type=int, default=96)
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--flush", action="store_true")
    a = p.parse_args()
    rng = random.Random(a.seed)
    prompts = [" ".join(f"w{rng.randrange(500)}" for _ in range(a.words)) for _ in range(a.prompts)]
    if a.flush:
        post(a.url + "/flush_cache")
        time.sleep(1)
    out = []
    start = time.time()
    for text in prompts:
        r = post(a.url + "/generate", {"text": text, "sampling_params": {"temperature": 0, "max_new_tokens": a.new_tokens, "ignore_eos": True}})
        out.append({"output_ids": r["output_ids"], "cached_tokens": r["meta_info"].get("cached_tokens"), "cached_tokens_details": r["meta_info"].get("cached_tokens_details")})
    json.dump({"seconds": round(time.time() - start, 2), "results": out}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
