/* The binding's functions, each declared once, for C (binding.h includes
 * this file) and for cffi's cdef (_build_cffi.py reads it).  A plain list of
 * declarations: cffi's parser takes no #include, #if or include guard, so
 * everything such lives in binding.h, and this file is included only there.
 *
 * Every function returning int reports failure as -errno.  A prep function
 * gets an SQE, prepares one request and tags it with user_data; it returns
 * 0, or -EBUSY when the submission queue is full.
 */

/* ---- the ring ---------------------------------------------------------- */

/* Set up a ring; 0 or -errno.  sq_thread_idle: the milliseconds an SQPOLL
   thread polls without work before it sleeps (with IORING_SETUP_SQPOLL in
   flags).  *features receives the kernel's IORING_FEAT_* bits, *sq_entries
   and *cq_out the sizes it granted. */
int aior_setup(struct io_uring *ring, unsigned entries, unsigned cq_entries,
               unsigned flags, unsigned sq_thread_idle, unsigned *features,
               unsigned *sq_entries, unsigned *cq_out);
/* supported[op] = 1 for every opcode op < n the kernel knows; returns the
   number of opcodes probed (last_op + 1) or -errno. */
int aior_probe(struct io_uring *ring, unsigned char *supported, int n);
/* Submit, then block until a CQE is ready: 0, or -ETIME after ms
   milliseconds without one (a closing ring drains with it). */
int aior_wait(struct io_uring *ring, unsigned ms);
int aior_ring_fd(struct io_uring *ring);
/* Turn the unread SQE tagged user_data into a NOP with the same tag (its CQE
   still comes): 1 if the kernel had not read it yet, 0 if it had. */
int aior_withdraw(struct io_uring *ring, uint64_t user_data);

/* ---- preparing requests ------------------------------------------------ */

/* A read/write-shaped request of opcode op; off -1 is the fd's position. */
int aior_prep_rw(struct io_uring *ring, int op, int fd, void *addr,
                 unsigned len, int64_t off, unsigned op_flags,
                 uint64_t user_data);
/* aior_prep_rw with IOSQE_* flags (IOSQE_ASYNC: to the kernel's workers at
   once, not issued inside the submitting call). */
int aior_prep_rw_sqe(struct io_uring *ring, int op, int fd, void *addr,
                     unsigned len, int64_t off, unsigned op_flags,
                     unsigned sqe_flags, uint64_t user_data);
/* A one-shot poll for mask on fd. */
int aior_prep_poll(struct io_uring *ring, int fd, unsigned mask,
                   uint64_t user_data);
int aior_prep_openat(struct io_uring *ring, int dfd, const char *path,
                     int flags, unsigned mode, uint64_t user_data);
int aior_prep_close(struct io_uring *ring, int fd, uint64_t user_data);
int aior_prep_statx(struct io_uring *ring, int dfd, const char *path, int flags,
                    unsigned mask, struct statx *buf, uint64_t user_data);
int aior_prep_unlinkat(struct io_uring *ring, int dfd, const char *path,
                       int flags, uint64_t user_data);
int aior_prep_renameat(struct io_uring *ring, int olddfd, const char *oldpath,
                       int newdfd, const char *newpath, unsigned flags,
                       uint64_t user_data);
int aior_prep_mkdirat(struct io_uring *ring, int dfd, const char *path,
                      unsigned mode, uint64_t user_data);
int aior_prep_linkat(struct io_uring *ring, int olddfd, const char *oldpath,
                     int newdfd, const char *newpath, int flags,
                     uint64_t user_data);
int aior_prep_symlinkat(struct io_uring *ring, const char *target, int newdfd,
                        const char *linkpath, uint64_t user_data);
int aior_prep_fallocate(struct io_uring *ring, int fd, int mode, int64_t offset,
                        int64_t len, uint64_t user_data);
int aior_prep_accept(struct io_uring *ring, int fd, struct sockaddr *addr,
                     socklen_t *addrlen, int flags, uint64_t user_data);
int aior_prep_connect(struct io_uring *ring, int fd, const struct sockaddr *addr,
                      unsigned addrlen, uint64_t user_data);
/* IORING_OP_SENDMSG or RECVMSG (op) over n iovecs, with an optional address
   (name): fills msg, which the kernel reads until the CQE. */
int aior_prep_msg(struct io_uring *ring, int op, int fd, struct msghdr *msg,
                  struct iovec *iov, unsigned n, void *name, unsigned namelen,
                  unsigned flags, uint64_t user_data);
/* splice(2) of up to nbytes; an offset -1 is the fd's position (or a pipe).
   sqe_flags may hold IOSQE_IO_LINK to chain the next SQE after this one. */
int aior_prep_splice(struct io_uring *ring, int fd_in, int64_t off_in, int fd_out,
                     int64_t off_out, unsigned nbytes, unsigned splice_flags,
                     unsigned sqe_flags, uint64_t user_data);
int aior_prep_shutdown(struct io_uring *ring, int fd, int how, uint64_t user_data);

/* ---- results ------------------------------------------------------------ */

/* The fields of os.stat_result, in its order, from a statx. */
void aior_statx_fields(const struct statx *st, int64_t out[16]);
unsigned aior_msg_namelen(const struct msghdr *msg);
int aior_msg_flags(const struct msghdr *msg);
unsigned aior_sockaddr_storage_size(void);
unsigned aior_msghdr_size(void);

/* ---- the threads backend's system calls --------------------------------- */

/* One per prep function, with its arguments less the ring and the tag,
   returning what the CQE would carry (a count, or -errno); -ECANCELED when
   aior_stop_request stopped it. */
int aior_sync_rw(int op, int fd, void *addr, unsigned len, int64_t off, unsigned op_flags);
int aior_sync_rw_sqe(int op, int fd, void *addr, unsigned len, int64_t off, unsigned op_flags,
                     unsigned sqe_flags);
int aior_sync_openat(int dfd, const char *path, int flags, unsigned mode);
int aior_sync_close(int fd);
int aior_sync_statx(int dfd, const char *path, int flags, unsigned mask, struct statx *buf);
int aior_sync_unlinkat(int dfd, const char *path, int flags);
int aior_sync_renameat(int olddfd, const char *oldpath, int newdfd, const char *newpath,
                       unsigned flags);
int aior_sync_mkdirat(int dfd, const char *path, unsigned mode);
int aior_sync_linkat(int olddfd, const char *oldpath, int newdfd, const char *newpath, int flags);
int aior_sync_symlinkat(const char *target, int newdfd, const char *linkpath);
int aior_sync_fallocate(int fd, int mode, int64_t offset, int64_t len);
int aior_sync_accept(int fd, struct sockaddr *addr, socklen_t *addrlen, int flags);
int aior_sync_connect(int fd, const struct sockaddr *addr, unsigned addrlen);
int aior_sync_msg(int op, int fd, struct msghdr *msg, struct iovec *iov, unsigned n,
                  void *name, unsigned namelen, unsigned flags);
int aior_sync_splice(int fd_in, int64_t off_in, int fd_out, int64_t off_out, unsigned nbytes,
                     unsigned splice_flags, unsigned sqe_flags);
int aior_sync_shutdown(int fd, int how);

/* Cancelling a worker's blocked call: install the signal's handler once
   (aior_stop_signal_setup); a worker brackets each call with
   aior_begin(request) and aior_end(); aior_stop_request signals the thread
   that makes `request` (0 or -errno). */
int aior_stop_signal_setup(int sig);
void aior_begin(int request);
void aior_end(void);
int aior_stop_request(unsigned long thread, int sig, int request);

/* ---- calls that do not wait (the loop's thread) -------------------------- */

/* An open that never waits (openat2 with RESOLVE_CACHED): the fd, or -EAGAIN
   when it could wait, or -errno; or, for a FIFO's read end that a blocking
   open would wait on, -(AIOR_FIFO_HELD + fd): that fd, still non-blocking,
   for the caller to wait with until a writer came. */
int aior_open_now(int dfd, const char *path, int flags);
/* A read (write = 0) or write at the fd's position that does not wait: the
   count when complete, -errno when nothing moved, or AIOR_PARTIAL + the
   count when the ring must do the rest of a regular file. */
int64_t aior_rw_now(int write, int fd, char *buf, unsigned n);
/* statfs's f_type of fd, or -errno. */
int64_t aior_fs_type(int fd);
/* Direct I/O's alignment on fd (STATX_DIOALIGN) into *mem and *off: 0, or
   -EOPNOTSUPP where not reported, or -errno. */
int aior_dio_align(int fd, unsigned *mem, unsigned *off);
/* Whether a request on fd may block (0 for a non-blocking pipe or socket). */
int aior_fd_may_block(int fd);
