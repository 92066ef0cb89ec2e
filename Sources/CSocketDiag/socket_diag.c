#include "socket_diag.h"

#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

int sp_tcp_socket_owner(int family, const unsigned char *local, unsigned short local_port,
                        const unsigned char *remote, unsigned short remote_port, unsigned int states,
                        struct sp_socket_owner_answer *answer_out) {
    if (family != AF_INET && family != AF_INET6) return -EAFNOSUPPORT;
    int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (fd < 0) return -errno;
    // The kernel answers within sendto (the lookup runs in the sender's context); the timeout only
    // guards against a kernel that never does.
    struct timeval timeout = { .tv_sec = 0, .tv_usec = 200000 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);

    struct {
        struct nlmsghdr header;
        struct inet_diag_req_v2 request;
    } message;
    memset(&message, 0, sizeof message);
    message.header.nlmsg_len = sizeof message;
    message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    message.header.nlmsg_flags = NLM_F_REQUEST;  // one socket, not a dump
    message.request.sdiag_family = (unsigned char)family;
    message.request.sdiag_protocol = IPPROTO_TCP;
    // Only the states asked for: every state (~0U) also found the TIME_WAIT entry a closed client
    // leaves, which the kernel reports with uid 0.
    message.request.idiag_states = states;
    message.request.id.idiag_sport = htons(local_port);
    message.request.id.idiag_dport = htons(remote_port);
    size_t length = family == AF_INET ? 4 : 16;
    memcpy(message.request.id.idiag_src, local, length);
    memcpy(message.request.id.idiag_dst, remote, length);
    message.request.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
    message.request.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;

    struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
    if (sendto(fd, &message, sizeof message, 0, (struct sockaddr *)&kernel, sizeof kernel) < 0) {
        int failure = errno;
        close(fd);
        return -failure;
    }
    int result = -EIO;
    union {
        struct nlmsghdr header;
        char bytes[8192];
    } answer;
    ssize_t received = recv(fd, &answer, sizeof answer, 0);
    if (received < 0) {
        result = -errno;
    } else {
        struct nlmsghdr *header = &answer.header;
        if (NLMSG_OK(header, (size_t)received)) {
            if (header->nlmsg_type == NLMSG_ERROR) {
                struct nlmsgerr *error = NLMSG_DATA(header);
                result = error->error < 0 ? error->error : -EIO;
            } else if (header->nlmsg_type == SOCK_DIAG_BY_FAMILY &&
                       header->nlmsg_len >= NLMSG_LENGTH(sizeof(struct inet_diag_msg))) {
                struct inet_diag_msg *found = NLMSG_DATA(header);
                answer_out->uid = found->idiag_uid;
                answer_out->inode = found->idiag_inode;
                answer_out->state = found->idiag_state;
                result = 0;
            }
        }
    }
    close(fd);
    return result;
}
