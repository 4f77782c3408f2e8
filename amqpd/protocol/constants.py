"""Wire constants of AMQP 0-9-1 that the fast path and the state machines need."""

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
# RabbitMQ still accepts the 0-9 and 0-8 headers some old clients send.
ACCEPTED_HEADERS = (PROTOCOL_HEADER, b"AMQP\x01\x01\x00\x09", b"AMQP\x01\x01\x08\x00", b"AMQP\x01\x01\x09\x01")

FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 0xCE
FRAME_END_BYTE = b"\xce"
FRAME_OVERHEAD = 8  # type(1) + channel(2) + size(4) + frame-end(1)
FRAME_MIN_SIZE = 4096

# (class_id, method_id) of the methods the hot path handles without pamqp.
CONNECTION_CLASS = 10
CHANNEL_CLASS = 20
EXCHANGE_CLASS = 40
QUEUE_CLASS = 50
BASIC_CLASS = 60
CONFIRM_CLASS = 85
TX_CLASS = 90

BASIC_PUBLISH = (60 << 16) | 40
BASIC_DELIVER = (60 << 16) | 60
BASIC_GET_OK = (60 << 16) | 71
BASIC_ACK = (60 << 16) | 80
BASIC_REJECT = (60 << 16) | 90
BASIC_NACK = (60 << 16) | 120

# Content header property flags (bit 15 first, in the order the spec lists the properties).
FLAG_CONTENT_TYPE = 1 << 15
FLAG_CONTENT_ENCODING = 1 << 14
FLAG_HEADERS = 1 << 13
FLAG_DELIVERY_MODE = 1 << 12
FLAG_PRIORITY = 1 << 11
FLAG_CORRELATION_ID = 1 << 10
FLAG_REPLY_TO = 1 << 9
FLAG_EXPIRATION = 1 << 8
FLAG_MESSAGE_ID = 1 << 7
FLAG_TIMESTAMP = 1 << 6
FLAG_TYPE = 1 << 5
FLAG_USER_ID = 1 << 4
FLAG_APP_ID = 1 << 3
FLAG_CLUSTER_ID = 1 << 2
