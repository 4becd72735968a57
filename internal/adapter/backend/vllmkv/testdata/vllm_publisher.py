"""A publisher that speaks vLLM's KV event protocol with libzmq (pyzmq) and
msgpack, for the interop test in interop_test.go. It is written from the
protocol described in vllm/distributed/kv_events.py, not taken from it.

Protocol on stdin, one JSON object per line:
  {"op": "batch", "drop": false, "rank": 0, "events": [...]}
      events are {"type": "BlockStored"|"BlockRemoved"|"AllBlocksCleared", ...}
      with vLLM's field names; a hash written "b:<hex>" is sent as bytes.
  {"op": "quit"}
With two arguments it binds those ports, else any free ones. It prints
"ready <pub_port> <replay_port>" once bound, then "sent <seq>"
after each batch.
"""
import collections
import json
import sys
import time

import msgpack
import zmq

END_SEQ = (-1).to_bytes(8, "big", signed=True)


def value(v):
    if isinstance(v, str) and v.startswith("b:"):
        return bytes.fromhex(v[2:])
    if isinstance(v, list):
        return [value(x) for x in v]
    return v


STORED = ["block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"]
REMOVED = ["block_hashes", "medium"]


def event(e):
    # msgspec's tagged struct as a map: the tag first, then the fields in
    # declaration order; fields without a default are always present.
    out = {"type": e["type"]}
    for f in {"BlockStored": STORED, "BlockRemoved": REMOVED}.get(e["type"], []):
        out[f] = value(e.get(f))
    return out


def main():
    ctx = zmq.Context.instance()
    pub = ctx.socket(zmq.PUB)
    replay = ctx.socket(zmq.ROUTER)
    if len(sys.argv) == 3:  # fixed ports: an engine restarted on its ports
        pub_port, replay_port = int(sys.argv[1]), int(sys.argv[2])
        pub.bind("tcp://127.0.0.1:%d" % pub_port)
        replay.bind("tcp://127.0.0.1:%d" % replay_port)
    else:
        pub_port = pub.bind_to_random_port("tcp://127.0.0.1")
        replay_port = replay.bind_to_random_port("tcp://127.0.0.1")
    buffer = collections.deque(maxlen=10_000)
    seq = 0
    print("ready", pub_port, replay_port, flush=True)
    poller = zmq.Poller()
    poller.register(replay, zmq.POLLIN)
    poller.register(sys.stdin, zmq.POLLIN)
    while True:
        ready = dict(poller.poll(1000))
        if replay in ready:
            frames = replay.recv_multipart()
            if len(frames) == 3:
                client, _, start = frames
                start = int.from_bytes(start, "big")
                for s, payload in buffer:
                    if s >= start:
                        replay.send_multipart((client, b"", s.to_bytes(8, "big"), payload))
                replay.send_multipart((client, b"", END_SEQ, b""))
        if sys.stdin.fileno() in ready or sys.stdin in ready:
            line = sys.stdin.readline()
            if not line:
                break
            cmd = json.loads(line)
            if cmd["op"] == "quit":
                break
            batch = {"ts": time.time(), "events": [event(e) for e in cmd["events"]],
                     "data_parallel_rank": cmd.get("rank", 0)}
            payload = msgpack.packb(batch, use_bin_type=True)
            if not cmd.get("drop"):
                pub.send_multipart((b"", seq.to_bytes(8, "big"), payload))
            buffer.append((seq, payload))
            print("sent", seq, flush=True)
            seq += 1
    pub.close(linger=0)
    replay.close(linger=0)


if __name__ == "__main__":
    main()
