"""A small CPU job for strace fixtures: threads, a forked child, signals, odd strings."""

import os
import signal
import sys
import threading
import time


def spin(n: int) -> None:
    total = 0
    for i in range(n):
        total += i * i
    os.write(1, f"thread {threading.get_ident() % 1000} {total}\n".encode())


signal.signal(signal.SIGUSR1, lambda *_: None)
threads = [threading.Thread(target=spin, args=(20000,)) for _ in range(3)]
for t in threads:
    t.start()
os.write(1, b'quote " tab \t newline \n bytes \x01\xff = ) = end\n')
os.kill(os.getpid(), signal.SIGUSR1)
pid = os.fork()
if pid == 0:
    time.sleep(5)
    os._exit(0)
os.kill(pid, signal.SIGKILL)
os.waitpid(pid, 0)
for t in threads:
    t.join()
with open("/dev/null", "wb") as f:
    f.write(b"x" * 100)
sys.exit(3)
