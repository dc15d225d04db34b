"""tty and socket ioctls for the fixtures: a pty, a socket pair, a UDP socket, and an NVIDIA
and an AMD KFD request number sent to the pty (which answers ENOTTY)."""

import array
import contextlib
import fcntl
import pty
import socket
import struct
import termios

master, slave = pty.openpty()
termios.tcgetattr(slave)
fcntl.ioctl(slave, termios.TIOCGWINSZ, b"\0" * 8)
fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
fcntl.ioctl(master, termios.FIONREAD, array.array("i", [0]))
a, b = socket.socketpair()
a.send(b"hello")
fcntl.ioctl(b, termios.FIONREAD, array.array("i", [0]))
b.setblocking(False)
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
fcntl.ioctl(udp, 0x8933, struct.pack("16si", b"lo", 0))  # SIOCGIFINDEX
with contextlib.suppress(OSError):
    fcntl.ioctl(udp, 0x8913, struct.pack("16sh", b"nosuchif0", 0))  # SIOCGIFFLAGS: ENODEV
with contextlib.suppress(OSError):
    fcntl.ioctl(slave, 0xC020462A, b"\0" * 32)  # NV_ESC_RM_CONTROL on a pty: ENOTTY
with contextlib.suppress(OSError):
    fcntl.ioctl(slave, 0xC0284B16, b"\0" * 40)  # AMDKFD_IOC_ALLOC_MEMORY_OF_GPU: ENOTTY
