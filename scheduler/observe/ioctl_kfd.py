"""AMD KFD (/dev/kfd, ROCm's compute interface) ioctl numbers.

From the Linux uapi header include/uapi/linux/kfd_ioctl.h (torvalds/linux; installed as
/usr/include/linux/kfd_ioctl.h by linux-libc-dev). Requests are ``AMDKFD_IOWR('K', nr, struct)``;
the struct sizes change between kernel versions, so requests are named by ``nr`` alone.
"""

from __future__ import annotations

# include/uapi/linux/kfd_ioctl.h: #define AMDKFD_IOCTL_BASE 'K'
AMDKFD_IOCTL_BASE = 0x4B

#: ``nr`` -> name (include/uapi/linux/kfd_ioctl.h; 0x24-0x26 were added in Linux 6.4-6.5).
KFD_IOCTLS: dict[int, str] = {
    0x01: "AMDKFD_IOC_GET_VERSION",
    0x02: "AMDKFD_IOC_CREATE_QUEUE",
    0x03: "AMDKFD_IOC_DESTROY_QUEUE",
    0x04: "AMDKFD_IOC_SET_MEMORY_POLICY",
    0x05: "AMDKFD_IOC_GET_CLOCK_COUNTERS",
    0x06: "AMDKFD_IOC_GET_PROCESS_APERTURES",
    0x07: "AMDKFD_IOC_UPDATE_QUEUE",
    0x08: "AMDKFD_IOC_CREATE_EVENT",
    0x09: "AMDKFD_IOC_DESTROY_EVENT",
    0x0A: "AMDKFD_IOC_SET_EVENT",
    0x0B: "AMDKFD_IOC_RESET_EVENT",
    0x0C: "AMDKFD_IOC_WAIT_EVENTS",
    0x0D: "AMDKFD_IOC_DBG_REGISTER_DEPRECATED",
    0x0E: "AMDKFD_IOC_DBG_UNREGISTER_DEPRECATED",
    0x0F: "AMDKFD_IOC_DBG_ADDRESS_WATCH_DEPRECATED",
    0x10: "AMDKFD_IOC_DBG_WAVE_CONTROL_DEPRECATED",
    0x11: "AMDKFD_IOC_SET_SCRATCH_BACKING_VA",
    0x12: "AMDKFD_IOC_GET_TILE_CONFIG",
    0x13: "AMDKFD_IOC_SET_TRAP_HANDLER",
    0x14: "AMDKFD_IOC_GET_PROCESS_APERTURES_NEW",
    0x15: "AMDKFD_IOC_ACQUIRE_VM",
    0x16: "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU",
    0x17: "AMDKFD_IOC_FREE_MEMORY_OF_GPU",
    0x18: "AMDKFD_IOC_MAP_MEMORY_TO_GPU",
    0x19: "AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU",
    0x1A: "AMDKFD_IOC_SET_CU_MASK",
    0x1B: "AMDKFD_IOC_GET_QUEUE_WAVE_STATE",
    0x1C: "AMDKFD_IOC_GET_DMABUF_INFO",
    0x1D: "AMDKFD_IOC_IMPORT_DMABUF",
    0x1E: "AMDKFD_IOC_ALLOC_QUEUE_GWS",
    0x1F: "AMDKFD_IOC_SMI_EVENTS",
    0x20: "AMDKFD_IOC_SVM",
    0x21: "AMDKFD_IOC_SET_XNACK_MODE",
    0x22: "AMDKFD_IOC_CRIU_OP",
    0x23: "AMDKFD_IOC_AVAILABLE_MEMORY",
    0x24: "AMDKFD_IOC_EXPORT_DMABUF",
    0x25: "AMDKFD_IOC_RUNTIME_ENABLE",
    0x26: "AMDKFD_IOC_DBG_TRAP",
}
