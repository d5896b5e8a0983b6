#!/usr/bin/env python3
"""A rogue client of iperf3's protocol, for checking a server's bounds on loopback only:
asks 127.0.0.1:PORT for `-t 1 -b 10M`, then trickles a byte every 100 ms on its stream and
never sends TEST_END (`trickle`), or sends all it can (`blast`). Prints when the server
cut it and with which iperf3 error code (37: past its end, 27: over --max-rate).

    target/release/pinperf -s -p 5399 -B 127.0.0.1 --max-rate 10M &
    python3 bench-scripts/rogue-iperf3.py 5399 trickle &
    sleep 0.3; until iperf3 -c 127.0.0.1 -p 5399 -t 1; do sleep 0.2; done
"""
import json, socket, struct, sys, threading, time
port, mode = int(sys.argv[1]), sys.argv[2]
cookie = b"abcdefghijklmnopqrstuvwxyz0123456789\0"
c = socket.create_connection(("127.0.0.1", port)); c.sendall(cookie)
assert c.recv(1) == b"\x09"
p = json.dumps({"tcp": True, "omit": 0, "time": 1, "parallel": 1, "len": 131072, "bandwidth": 10_000_000}).encode()
c.sendall(struct.pack(">I", len(p)) + p)
assert c.recv(1) == b"\x0a"
d = socket.create_connection(("127.0.0.1", port)); d.sendall(cookie)
assert c.recv(1) == b"\x01" and c.recv(1) == b"\x02"
t0 = time.time()
def feed():
    chunk, gap = (b"x", 0.1) if mode == "trickle" else (b"\0" * 65536, 0)
    try:
        while True:
            d.sendall(chunk); time.sleep(gap)
    except OSError:
        pass
threading.Thread(target=feed, daemon=True).start()
state = c.recv(9)
print(f"{mode}: cut {time.time()-t0:.2f} s after TEST_RUNNING, state {state[0]-256}, code {struct.unpack('>i', state[1:5])[0]}")
