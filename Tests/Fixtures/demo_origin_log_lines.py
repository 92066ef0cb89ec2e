"""Starts config/demo/origin.py (DEMO_DIR, argv[1]) on a free port with its log appended to a file as
run.sh does, sends ROUNDS rounds of CONCURRENT requests that start together (a barrier), stops it, and
prints one JSON line: how many log lines there are, how many parse as JSON, how many requests were
answered. The demo's checks read these lines, so each must be whole."""
import json, os, subprocess, sys, tempfile, threading, time, urllib.request

demo, rounds, concurrent = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
scratch = tempfile.mkdtemp()
log, ready = os.path.join(scratch, "origin.log"), os.path.join(scratch, "origin.port")
with open(log, "ab") as out:
    server = subprocess.Popen([sys.executable, "-B", os.path.join(demo, "origin.py"), "partner", "--port", "0",
                               "--ready-file", ready], stdin=subprocess.DEVNULL, stdout=out, stderr=out)
answered = []
try:
    while not os.path.exists(ready):
        if server.poll() is not None:
            sys.exit("origin.py exited before it listened")
        time.sleep(0.01)
    port = int(open(ready).read())
    for round_number in range(rounds):
        barrier = threading.Barrier(concurrent)

        def get(index):
            barrier.wait()
            request = urllib.request.Request(f"http://127.0.0.1:{port}/r{round_number}/{index}",
                                             headers={"Authorization": "Bearer demo-access-token-1"})
            with urllib.request.urlopen(request, timeout=60) as response:
                response.read()
            answered.append(index)

        threads = [threading.Thread(target=get, args=(index,)) for index in range(concurrent)]
        for thread in threads: thread.start()
        for thread in threads: thread.join()
finally:
    server.terminate()
    server.wait()
lines = open(log).read().split("\n")
whole = 0
for line in lines[:-1]:
    try:
        json.loads(line)
        whole += 1
    except ValueError:
        pass
print(json.dumps({"lines": len(lines) - 1, "whole": whole, "answered": len(answered), "last": lines[-1]}))
