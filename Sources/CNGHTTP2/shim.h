#ifndef SCOPEPROXY_CNGHTTP2_SHIM_H
#define SCOPEPROXY_CNGHTTP2_SHIM_H
// libnghttp2 (Debian 12: 1.52): HTTP/2 framing, HPACK and flow control, driven from the event loop
// with nghttp2_session_mem_recv / nghttp2_session_mem_send (no I/O callbacks). Every decision about a
// stream stays in Swift.
#include <nghttp2/nghttp2.h>

// nghttp2's enums import into Swift as structs of different raw types (the error enum is signed,
// the flag enums unsigned); these give the values callbacks return or set as the C types they use.
static inline int sp_nghttp2_err_deferred(void) { return NGHTTP2_ERR_DEFERRED; }
static inline int sp_nghttp2_err_callback_failure(void) { return NGHTTP2_ERR_CALLBACK_FAILURE; }
static inline int sp_nghttp2_err_temporal_callback_failure(void) { return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; }
static inline uint32_t sp_nghttp2_data_flag_eof(void) { return NGHTTP2_DATA_FLAG_EOF; }
static inline uint32_t sp_nghttp2_data_flag_no_end_stream(void) { return NGHTTP2_DATA_FLAG_NO_END_STREAM; }
static inline uint8_t sp_nghttp2_flag_end_stream(void) { return NGHTTP2_FLAG_END_STREAM; }
static inline uint8_t sp_nghttp2_nv_flag_none(void) { return NGHTTP2_NV_FLAG_NONE; }
static inline uint8_t sp_nghttp2_nv_flag_no_index(void) { return NGHTTP2_NV_FLAG_NO_INDEX; }

// The frame fields Swift reads through the nghttp2_frame union, as plain functions (the union's
// import is correct, but these keep the callback code to one line per field).
static inline uint8_t sp_nghttp2_frame_type(const nghttp2_frame *frame) { return frame->hd.type; }
static inline uint8_t sp_nghttp2_frame_flags(const nghttp2_frame *frame) { return frame->hd.flags; }
static inline int32_t sp_nghttp2_frame_stream(const nghttp2_frame *frame) { return frame->hd.stream_id; }
static inline int sp_nghttp2_frame_headers_category(const nghttp2_frame *frame) { return (int)frame->headers.cat; }
static inline uint32_t sp_nghttp2_frame_rst_code(const nghttp2_frame *frame) { return frame->rst_stream.error_code; }
static inline uint32_t sp_nghttp2_frame_goaway_code(const nghttp2_frame *frame) { return frame->goaway.error_code; }
static inline int32_t sp_nghttp2_frame_goaway_last_stream(const nghttp2_frame *frame) { return frame->goaway.last_stream_id; }
static inline int sp_nghttp2_hcat_request(void) { return NGHTTP2_HCAT_REQUEST; }
static inline int sp_nghttp2_hcat_push_response(void) { return NGHTTP2_HCAT_PUSH_RESPONSE; }

#endif
