#!/usr/bin/env bash
# Regenerates the strace fixtures in this folder with the real strace (6.1 on Debian 12), on a
# CPU-only machine. The workload is workload.py (threads, a fork killed by SIGKILL, SIGUSR1,
# a string with escapes, exit status 3). Filters keep the files small; the tests only read them.
set -euo pipefail
cd "$(dirname "$0")"
P=/usr/bin/python3
W=workload.py
QUIET='trace=!mmap,mprotect,munmap,newfstatat,fstat,brk,lseek,getdents64,rt_sigaction,readlink,getrandom,pread64,ioctl,close,read,openat,fcntl,getcwd,sysinfo,prlimit64,arch_prctl,set_tid_address,set_robust_list,rseq,access,execve,rt_sigprocmask,futex'
strace -f -tt -T -y -s 64 -e "$QUIET" -o f_tt_T_y.strace $P -S $W >/dev/null || true
strace -f -e trace=write,clone,clone3,kill,wait4,exit -s 24 $P -S $W >/dev/null 2>stderr_form.strace || true
rm -rf ff && mkdir ff && strace -ff -e trace=write,clone,clone3,kill,wait4,exit_group -o ff/workload $P -S $W >/dev/null || true
strace -c -f -o c.summary $P -S $W >/dev/null || true
strace -c -w -f -o c_w.summary $P -S $W >/dev/null || true
strace -C -f -e trace=write,clone3,clone,kill,wait4 -o C.strace $P -S $W >/dev/null || true
strace -k -e trace=write,kill -o k.strace $P -S $W >/dev/null || true
strace -r -e trace=write,kill,wait4 -o r.strace $P -S $W >/dev/null || true
strace -ttt -yy -X verbose -e trace=openat,write,kill -o ttt_yy_X_verbose.strace $P -S $W >/dev/null || true
strace -f -t -i -n --decode-pids=comm -e trace=write,kill,clone -o t_i_n_comm.strace $P -S $W >/dev/null || true
strace -x -s 16 -e trace=write -o x_hex.strace $P -S $W >/dev/null || true
strace -e trace=none -o segv.strace $P -c 'import os; os.kill(os.getpid(), 11)' || true
strace -v -yy -e trace=ioctl,socket,socketpair -o tty_socket.strace $P -S ttysock.py >/dev/null || true
strace -e trace=write -e write=1 -o write_dump.strace /bin/echo hello >/dev/null
# a thread's execve replaces the leader: "+++ superseded by execve in pid N +++"
strace -f -e trace=execve,exit_group -o superseded.strace $P -S -c 'import os, threading, time
threading.Thread(target=os.execv, args=("/bin/true", ["true"])).start(); time.sleep(2)'
