#include <gtest/gtest.h>

#include <cstring>

#include "gpumem/proto/codec.hpp"
#include "gpumem/proto/mailbox.hpp"

namespace gpumem::proto {
namespace {

wire_name name_of(std::string_view text) {
  wire_name name{};
  EXPECT_FALSE(make_wire_name(text, name));
  return name;
}

// One valid, non-trivial value of every payload type; the table below cannot name a payload
// without one.
template <class T>
T sample();
template <>
empty_payload sample() {
  return {};
}
template <>
hello_request sample() {
  return {kProtocolVersion, 0, name_of("trainer-7"), 42, {{0x0123456789abcdef, 7}}};
}
template <>
hello_reply sample() {
  return {42, 3, kMaxPayloadSize, 1234, kFeatureCuda, {{0x0123456789abcdef, 7}}, 0x5eed};
}
template <>
get_pool_request sample() {
  return {2, 0};
}
template <>
pool_reply sample() {
  pool_reply reply{2, 1, 1ull << 34, name_of("gpu1"), {}};
  reply.ready_event[0] = 0xee;
  return reply;
}
template <>
allocate_request sample() {
  return {1 << 20, kHostDevice, 0, name_of("frames"), name_of("host")};
}
template <>
open_request sample() {
  return {name_of("frames"), access_mode::read_only, 0};
}
template <>
allocation_reply sample() {
  allocation_reply reply{7, 4096, 1 << 20, 0, access_mode::read_write, {}};
  reply.pointer_export[63] = 0x42;
  return reply;
}
template <>
release_request sample() {
  release_request request{7, kReleaseHasEvent, 0, {}};
  request.released_event[5] = 0x17;
  return request;
}
template <>
list_request sample() {
  return {99};
}
template <>
stats_reply sample() {
  stats_reply reply;
  reply.head = {2, 5, 1000, 77, 0, 9, 3, 0};
  reply.records.push_back({name_of("host"), 0, kHostDevice, 1 << 30, 10, 4096, 20, 1, 0, 0, 0, 0});
  reply.records.push_back({name_of("gpu0"), 1, 0, 1ull << 33, 0, 0, 0, 0, 2 << 20, 4 << 20, 0, 64});
  return reply;
}
template <>
client_list_reply sample() {
  client_list_reply reply;
  reply.head = {1, 0};
  reply.records.push_back({3, 100, 1000, 1000, 1, 2, 0, 4096, 55, name_of("worker")});
  return reply;
}
template <>
allocation_list_reply sample() {
  allocation_list_reply reply;
  reply.head = {2, 1};
  reply.records.push_back({1, 64, 3, 0, 2, name_of("a")});
  reply.records.push_back({2, 128, 0, 0, 1, wire_name{}});
  return reply;
}

template <>
reserve_request sample() {
  return {1ull << 30, 2 << 20, 0, 0, name_of("kv-cache")};
}
template <>
reservation_reply sample() {
  return {5, 1ull << 30, 4 << 20, 2 << 20, 0, access_mode::read_only, 3};
}
template <>
resize_request sample() {
  return {5, 8 << 20};
}
template <>
chunks_request sample() {
  return {5, 2, chunk_set::draft, 4};
}
template <>
chunks_reply sample() {
  chunks_reply reply;
  reply.head = {2, 1, 300, 4, reservation_state::awake, 9};
  reply.records.push_back({17, 2});
  reply.records.push_back({18, 3});
  return reply;
}
template <>
reservation_list_reply sample() {
  reservation_list_reply reply;
  reply.head = {1, 0};
  reply.records.push_back({5, 1ull << 30, 4 << 20, 2, 3, 0, name_of("kv"), 3, 4, 2, 8 << 20, 0,
                           reservation_state::awake, 2, 1, 0});
  return reply;
}
template <>
reservation_release_request sample() {
  return {5};
}
template <>
begin_version_request sample() {
  return {5, 64 << 20};
}
template <>
version_request sample() {
  return {5, 4};
}
template <>
reservation_target sample() {
  return {0, name_of("weights")};
}
template <>
sleep_request sample() {
  return {{5, wire_name{}}, kSleepDiscard, 2500};
}
template <>
reservation_status sample() {
  return {5, 3, 4 << 20, 4 << 20, reservation_state::asleep, 12, 0, 24, "client 3 did not let go"};
}

template <>
sync_attach_reply sample() {
  return {3, 4096, 1024, 2};
}
template <>
sync_open_request sample() {
  return {name_of("frames.ring"), sync_kind::channel, 3, sync_role::consumer, 0};
}
template <>
sync_open_reply sample() {
  return {2 * 1024 + 12, 2, 3, 2};
}
template <>
channel_open_request sample() {
  return {sample<sync_open_request>(), {1 << 20, 8, 0}};
}
template <>
sync_close_request sample() {
  return {2 * 1024 + 12, 2};
}
template <>
sync_reset_request sample() {
  return {name_of("stage.barrier"), 4, 0};
}
template <>
sync_list_reply sample() {
  sync_list_reply reply;
  reply.head = {1, 0};
  reply.records.push_back({9, sync_kind::lock, 4, 1, 0, 2, sync_record::kHeld | 1, 4242, 3, 1, 7,
                           name_of("kv.lock"), 5});
  return reply;
}
template <>
usage_list_reply sample() {
  usage_list_reply reply;
  reply.head = {1, 0};
  reply.records.push_back({1001, 0, 2, 4096, 1 << 20, 3, 1, 256, kNoLimit, 100000, 256});
  return reply;
}
template <>
signal_page_request sample() {
  return {1, 2};
}
template <>
signal_page_reply sample() {
  return {2 << 20, 0, 512};
}
template <>
sync_page_request sample() {
  return {2, 0};
}
template <>
sync_page_reply sample() {
  return {2, 4096, 1024, 0};
}
template <>
event_record sample() {
  event_record event{};
  event.sequence = 12;
  event.time_ms = 1'700'000'000'000;
  event.kind = event_kind::reclaimed;
  event.client_id = 7;
  event.pid = 4242;
  event.uid = 1001;
  event.bytes = 1 << 20;
  event.count = 2;
  event.label = name_of("trainer-7");
  return event;
}
template <>
metrics_request sample() {
  return {3, 65000, 0};
}
template <>
mailbox_reply sample() {
  return {static_cast<std::uint32_t>(kMailboxBytes), 0};
}
template <>
metrics_reply sample() {
  metrics_reply reply;
  const std::string_view text = "# TYPE gpumemd_clients gauge\ngpumemd_clients 2\n";
  reply.records.assign(text.begin(), text.end());
  reply.head = {3, static_cast<std::uint32_t>(text.size()) + 10, 10,
                static_cast<std::uint32_t>(text.size()), 0};
  return reply;
}

template <class T>
std::vector<std::byte> payload_bytes(const T& value) {
  std::vector<std::byte> frame;
  append_frame(frame, 1, 0, value);
  return {frame.begin() + sizeof(header), frame.end()};
}

template <class T>
void expect_round_trip(std::uint16_t type) {
  const T original = sample<T>();
  std::vector<std::byte> frame;
  append_frame(frame, type, 0xabcdef, original);
  frame_view view;
  std::error_code error;
  ASSERT_EQ(parse_frame(frame, view, error), parse_status::complete) << error.message();
  EXPECT_EQ(view.head.type, type);
  EXPECT_EQ(view.head.request_id, 0xabcdefu);
  EXPECT_EQ(view.frame_size(), frame.size());
  T decoded{};
  const auto error_decoding = decode_payload(view.payload, decoded);
  ASSERT_FALSE(error_decoding) << "message type " << type << ": " << error_decoding.message();
  EXPECT_EQ(payload_bytes(decoded), payload_bytes(original)) << "message type " << type;
}

TEST(Protocol, EveryRequestAndReplyRoundTrips) {
#define GPUMEM_X(name, id, request, reply, fds, summary) \
  expect_round_trip<request>(id);                        \
  expect_round_trip<reply>(reply_type(message_type::name));
  GPUMEM_MESSAGE_TABLE(GPUMEM_X)
#undef GPUMEM_X
  const auto refusal = make_error_reply(errc::not_found, "no allocation named 'x'");
  std::vector<std::byte> frame;
  append_frame(frame, static_cast<std::uint16_t>(message_type::error), 1, refusal);
  frame_view view;
  std::error_code error;
  ASSERT_EQ(parse_frame(frame, view, error), parse_status::complete);
  error_reply decoded{};
  ASSERT_FALSE(decode_payload(view.payload, decoded));
  EXPECT_EQ(decoded.code, static_cast<std::uint32_t>(errc::not_found));
  EXPECT_STREQ(decoded.text, "no allocation named 'x'");
}

TEST(Protocol, TableNamesAreUniqueAndFindable) {
  for (const auto& info : kMessages) {
    ASSERT_NE(find_request(static_cast<std::uint16_t>(info.type)), nullptr) << info.name;
    EXPECT_STREQ(find_request(static_cast<std::uint16_t>(info.type))->name, info.name);
  }
  EXPECT_EQ(find_request(0), nullptr);
  EXPECT_EQ(find_request(reply_type(message_type::ping)), nullptr);
}

class MalformedFrame : public ::testing::Test {
 protected:
  MalformedFrame() {
    append_frame(frame, static_cast<std::uint16_t>(message_type::ping), 1, empty_payload{});
  }
  header& head() { return *reinterpret_cast<header*>(frame.data()); }
  std::error_code parse_error() {
    frame_view view;
    std::error_code error;
    EXPECT_EQ(parse_frame(frame, view, error), parse_status::invalid);
    return error;
  }
  std::vector<std::byte> frame;
};

TEST_F(MalformedFrame, ShortHeaderIsIncompleteNotAnError) {
  frame_view view;
  std::error_code error;
  EXPECT_EQ(parse_frame(std::span(frame).first(sizeof(header) - 1), view, error),
            parse_status::incomplete);
  EXPECT_FALSE(error);
}

TEST_F(MalformedFrame, BadMagicIsRejected) {
  head().magic ^= 1;
  EXPECT_EQ(parse_error(), errc::bad_message);
}

TEST_F(MalformedFrame, OtherVersionIsRejected) {
  head().version = kProtocolVersion + 1;
  EXPECT_EQ(parse_error(), errc::unsupported_version);
}

TEST_F(MalformedFrame, OversizedLengthIsRejectedBeforeThePayloadArrives) {
  head().payload_size = kMaxPayloadSize + 1;
  EXPECT_EQ(parse_error(), errc::bad_message);
  head().payload_size = 0xffffffff;
  EXPECT_EQ(parse_error(), errc::bad_message);
}

TEST_F(MalformedFrame, UnknownTypeIsRejected) {
  head().type = 0x1234;
  EXPECT_EQ(parse_error(), errc::unknown_message_type);
  head().type = 0;
  EXPECT_EQ(parse_error(), errc::unknown_message_type);
}

TEST_F(MalformedFrame, NonZeroReservedWordIsRejected) {
  head().reserved = 1;
  EXPECT_EQ(parse_error(), errc::bad_message);
}

TEST_F(MalformedFrame, DescriptorsWithoutATypeOrTypeWithoutDescriptorsAreRejected) {
  head().fd_count = 1;
  EXPECT_EQ(parse_error(), errc::unexpected_handle);
  head().fd_count = 0;
  head().handle = static_cast<std::uint16_t>(handle_type::host_memfd);
  EXPECT_EQ(parse_error(), errc::unexpected_handle);
}

TEST_F(MalformedFrame, TooManyDescriptorsOrUnknownHandleTypeIsRejected) {
  head().handle = static_cast<std::uint16_t>(handle_type::host_memfd);
  head().fd_count = kMaxFdsPerMessage + 1;
  EXPECT_EQ(parse_error(), errc::bad_message);
  head().fd_count = 1;
  head().handle = 99;
  EXPECT_EQ(parse_error(), errc::bad_message);
}

TEST_F(MalformedFrame, TruncatedPayloadWaitsForMoreBytes) {
  frame.clear();
  append_frame(frame, static_cast<std::uint16_t>(message_type::release), 1,
               release_request{5, 0, 0, {}});
  frame_view view;
  std::error_code error;
  EXPECT_EQ(parse_frame(std::span(frame).first(frame.size() - 1), view, error),
            parse_status::incomplete);
}

TEST(MalformedPayload, WrongSizeIsRejected) {
  auto bytes = payload_bytes(sample<release_request>());
  release_request decoded{};
  EXPECT_EQ(decode_payload(std::span(bytes).first(bytes.size() - 1), decoded), errc::bad_message);
  bytes.push_back(std::byte{0});
  EXPECT_EQ(decode_payload(bytes, decoded), errc::bad_message);
  empty_payload nothing;
  EXPECT_EQ(decode_payload(bytes, nothing), errc::bad_message);
}

TEST(MalformedPayload, UnterminatedNameIsRejected) {
  auto request = sample<open_request>();
  std::memset(request.name.bytes, 'a', kNameCapacity);
  open_request decoded{};
  EXPECT_EQ(decode_payload(payload_bytes(request), decoded), errc::invalid_name);
}

TEST(MalformedPayload, ForbiddenCharactersAndGarbageAfterTheNulAreRejected) {
  auto request = sample<open_request>();
  request.name.bytes[1] = '\n';
  open_request decoded{};
  EXPECT_EQ(decode_payload(payload_bytes(request), decoded), errc::invalid_name);
  request = sample<open_request>();
  request.name.bytes[kNameCapacity - 1] = 'x';
  EXPECT_EQ(decode_payload(payload_bytes(request), decoded), errc::invalid_name);
}

TEST(MalformedPayload, EmptyNameIsRejectedWhereOneIsRequired) {
  auto request = sample<open_request>();
  request.name = {};
  open_request decoded{};
  EXPECT_EQ(decode_payload(payload_bytes(request), decoded), errc::invalid_name);
}

TEST(MalformedPayload, OutOfRangeEnumsAndFlagsAreRejected) {
  auto open = sample<open_request>();
  open.access = static_cast<access_mode>(7);
  open_request decoded_open{};
  EXPECT_EQ(decode_payload(payload_bytes(open), decoded_open), errc::bad_message);
  auto allocate = sample<allocate_request>();
  allocate.flags = 1;
  allocate_request decoded_allocate{};
  EXPECT_EQ(decode_payload(payload_bytes(allocate), decoded_allocate), errc::bad_message);
  allocate = sample<allocate_request>();
  allocate.device = -2;
  EXPECT_EQ(decode_payload(payload_bytes(allocate), decoded_allocate), errc::bad_message);
  allocate = sample<allocate_request>();
  allocate.size = 0;
  EXPECT_EQ(decode_payload(payload_bytes(allocate), decoded_allocate), errc::invalid_argument);
}

TEST(MalformedPayload, AChannelOpenIsOfAChannelAndItsLayoutsReservedWordZero) {
  channel_open_request decoded{};
  auto lock = sample<channel_open_request>();
  lock.open.kind = sync_kind::lock;
  lock.open.parties = 0;
  lock.open.role = sync_role::party;
  EXPECT_EQ(decode_payload(payload_bytes(lock), decoded), errc::bad_message);
  auto reserved = sample<channel_open_request>();
  reserved.layout.reserved = 1;
  EXPECT_EQ(decode_payload(payload_bytes(reserved), decoded), errc::bad_message);
  // Zero slots are the daemon's to refuse, by the channel's name.
  auto empty = sample<channel_open_request>();
  empty.layout.slots = 0;
  EXPECT_FALSE(decode_payload(payload_bytes(empty), decoded));
}

TEST(MalformedPayload, AResumeNamesItsSessionAndTokenOrNeither) {
  hello_request decoded{};
  auto fresh = sample<hello_request>();
  fresh.resume_client_id = 0;
  fresh.resume_token = {};
  EXPECT_FALSE(decode_payload(payload_bytes(fresh), decoded));
  auto no_token = sample<hello_request>();
  no_token.resume_token = {};
  EXPECT_EQ(decode_payload(payload_bytes(no_token), decoded), errc::bad_message);
  auto no_session = sample<hello_request>();
  no_session.resume_client_id = 0;
  EXPECT_EQ(decode_payload(payload_bytes(no_session), decoded), errc::bad_message);
}

TEST(MalformedPayload, AHelloReplyWithoutTokenOrInstanceIsRejected) {
  hello_reply decoded{};
  auto reply = sample<hello_reply>();
  reply.token = {};
  EXPECT_EQ(decode_payload(payload_bytes(reply), decoded), errc::bad_message);
  reply = sample<hello_reply>();
  reply.daemon_instance = 0;
  EXPECT_EQ(decode_payload(payload_bytes(reply), decoded), errc::bad_message);
}

TEST(MalformedPayload, ListCountThatDisagreesWithTheLengthIsRejected) {
  auto bytes = payload_bytes(sample<client_list_reply>());
  client_list_reply decoded;
  auto* head = reinterpret_cast<list_head*>(bytes.data());
  head->count = 2;
  EXPECT_EQ(decode_payload(bytes, decoded), errc::bad_message);
  head->count = 0xffffffff;
  EXPECT_EQ(decode_payload(bytes, decoded), errc::bad_message);
  head->count = 1;
  head->more = 2;
  EXPECT_EQ(decode_payload(bytes, decoded), errc::bad_message);
}

TEST(MalformedPayload, MetricsPagesThatDoNotAddUpOrCarryControlBytesAreRejected) {
  metrics_reply decoded;
  metrics_reply page = sample<metrics_reply>();
  page.head.more = 1;  // yet the page ends the text
  EXPECT_EQ(decode_payload(payload_bytes(page), decoded), errc::bad_message);
  page = sample<metrics_reply>();
  page.head.total = page.head.offset;  // fewer bytes in all than this page carries
  EXPECT_EQ(decode_payload(payload_bytes(page), decoded), errc::bad_message);
  page = sample<metrics_reply>();
  page.records[0] = '\x1b';
  EXPECT_EQ(decode_payload(payload_bytes(page), decoded), errc::bad_message);
  metrics_request later_page_of_nothing{0, 100, 0};
  metrics_request request{};
  EXPECT_EQ(decode_payload(payload_bytes(later_page_of_nothing), request), errc::bad_message);
}

TEST(MalformedPayload, EventsOfUnknownKindsOrUnterminatedReasonsAreRejected) {
  event_record decoded{};
  event_record event = sample<event_record>();
  event.kind = static_cast<event_kind>(kEventKinds);
  EXPECT_EQ(decode_payload(payload_bytes(event), decoded), errc::bad_message);
  event = sample<event_record>();
  std::memset(event.reason, 'r', sizeof event.reason);
  EXPECT_EQ(decode_payload(payload_bytes(event), decoded), errc::bad_message);
  event = sample<event_record>();
  event.code = 999;
  EXPECT_EQ(decode_payload(payload_bytes(event), decoded), errc::bad_message);
}

TEST(MalformedPayload, ErrorReplyWithUnknownCodeOrUnterminatedTextIsRejected) {
  auto refusal = make_error_reply(errc::internal, "x");
  refusal.code = 999;
  error_reply decoded{};
  EXPECT_EQ(decode_payload(payload_bytes(refusal), decoded), errc::bad_message);
  refusal = make_error_reply(errc::internal, "x");
  std::memset(refusal.text, 'y', sizeof refusal.text);
  EXPECT_EQ(decode_payload(payload_bytes(refusal), decoded), errc::bad_message);
}

TEST(WireName, LongestNameFitsAndOneMoreDoesNot) {
  wire_name name{};
  EXPECT_FALSE(make_wire_name(std::string(kMaxNameLength, 'n'), name));
  EXPECT_EQ(name.view().size(), kMaxNameLength);
  EXPECT_FALSE(check_wire_name(name, false));
  EXPECT_EQ(make_wire_name(std::string(kMaxNameLength + 1, 'n'), name), errc::invalid_name);
  EXPECT_EQ(make_wire_name("two words", name), errc::invalid_name);
  EXPECT_EQ(make_wire_name(std::string("nul\0inside", 10), name), errc::invalid_name);
}

TEST(ErrorReply, TextIsCutToFitAndMadePrintable) {
  const auto reply = make_error_reply(errc::internal, std::string(1000, 'z') + "\x01");
  EXPECT_EQ(std::strlen(reply.text), kErrorTextCapacity - 1);
  const auto control = make_error_reply(errc::internal, "a\tb");
  EXPECT_STREQ(control.text, "a?b");
}

TEST(ErrorCategory, CodesHaveNamesAndACategory) {
  const std::error_code code = errc::out_of_memory;
  EXPECT_STREQ(code.category().name(), "gpumem");
  EXPECT_EQ(code.message(), "pool exhausted");
  EXPECT_TRUE(is_known_errc(23));
  EXPECT_EQ(std::error_code(errc::session_lost).message(), "session lost");
  EXPECT_FALSE(is_known_errc(1000));
}

}  // namespace
}  // namespace gpumem::proto
