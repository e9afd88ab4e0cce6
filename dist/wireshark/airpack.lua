-- airpack.lua: a Wireshark dissector for airpack bundles (docs/wire-format.md).
--
-- Decodes the bundle payloads of the three encodings airpack speaks
-- (native v1, kau = seed 001's meta packet, simplemux normal flavour), shows
-- their header and separator fields, checks the framing with the same rules
-- and error names as crates/core/src/wire/ (`airpack.error`, `airpack.inner_error`),
-- and hands every inner packet to Wireshark's IPv4 / IPv6 dissector.
--
-- Where bundles are found: IPv4 / IPv6 protocol 253 and 254 (raw transport),
-- and UDP port 4150 (transport = "udp"; change it in the preferences).
--
-- The encoding is per peer and not written on the wire; preference
-- `airpack.encoding` (auto | native | kau | simplemux). `auto` picks the
-- first encoding whose framing adds up exactly (native: first byte 0x1X;
-- then kau; then simplemux); force it when a capture is ambiguous.
--
-- The other airpack formats have their own ports and files in airpack/ next
-- to this one, loaded at the end of this file: airpack/hello.lua (neighbour
-- hellos, UDP 4151), airpack/downlink.lua (downlink frames, seed and compact
-- layouts, UDP 8888), airpack/dlreg.lua (downlink registration, UDP 8889).
--
-- Use:  tshark -X lua_script:dist/wireshark/airpack.lua -r capture.pcap
-- Install (the file and its directory together):
--   cp -r dist/wireshark/airpack.lua dist/wireshark/airpack ~/.local/lib/wireshark/plugins/
-- (Wireshark may load the files in airpack/ by itself too; each loads once.)
--
-- Extension point for a format carried in the bundles' own protocol numbers
-- or port: `airpack_register_format` at the end.

local p = Proto("airpack", "airpack bundle")

local ENC = { auto = 0, native = 1, kau = 2, simplemux = 3 }
local enc_names = { [0] = "auto", [1] = "native", [2] = "kau", [3] = "simplemux" }

p.prefs.encoding = Pref.enum("Encoding", ENC.auto,
    "Bundle encoding (per peer in airpack's configuration; auto guesses)",
    { { 1, "auto", ENC.auto }, { 2, "native", ENC.native },
      { 3, "kau", ENC.kau }, { 4, "simplemux", ENC.simplemux } }, false)
p.prefs.udp_port = Pref.uint("UDP port", 4150, "daemon.udp_port of the UDP transport")
p.prefs.sealed = Pref.bool("Authenticated (mesh key)", false,
    "discovery.key is set: every bundle ends in a 20-byte trailer (node, sequence number, SipHash tag; not verified here)")

-- The authentication trailer of wire::sealed (docs/wire-format.md).
local TRAILER = 20

local MAX_BUNDLE = 65535
local MAX_PACKETS = 1024

local f = {
    encoding = ProtoField.string("airpack.encoding", "Encoding"),
    count = ProtoField.uint16("airpack.count", "Inner packets"),
    error = ProtoField.string("airpack.error", "Bundle refused"),
    version = ProtoField.uint8("airpack.native.version", "Version", base.DEC, nil, 0xF0),
    mode = ProtoField.uint8("airpack.native.mode", "Mode", base.DEC,
        { [0] = "whole packets" }, 0x0F),
    crit = ProtoField.uint8("airpack.native.crit", "Must-understand flags", base.HEX, nil, 0xF0),
    info = ProtoField.uint8("airpack.native.info", "May-ignore flags", base.HEX, nil, 0x0F),
    packet = ProtoField.bytes("airpack.packet", "Inner packet"),
    auth_node = ProtoField.uint32("airpack.auth.node", "Sender node", base.HEX),
    auth_seq = ProtoField.uint64("airpack.auth.seq", "Sequence number"),
    auth_tag = ProtoField.bytes("airpack.auth.tag", "Tag (SipHash-2-4, not verified)"),
    index = ProtoField.uint16("airpack.index", "Index"),
    len = ProtoField.uint32("airpack.len", "Length"),
    sep = ProtoField.bytes("airpack.separator", "Length prefix / separator"),
    sep_len = ProtoField.uint8("airpack.separator_len", "Separator bytes"),
    spb = ProtoField.bool("airpack.simplemux.spb", "Single protocol (SPB)"),
    proto = ProtoField.uint8("airpack.simplemux.protocol", "Protocol", base.DEC,
        { [4] = "IPv4", [41] = "IPv6" }),
    inner_error = ProtoField.string("airpack.inner_error", "Inner packet refused"),
}
p.fields = { f.auth_node, f.auth_seq, f.auth_tag, f.encoding, f.count, f.error, f.version, f.mode, f.crit, f.info, f.packet,
    f.index, f.len, f.sep, f.sep_len, f.spb, f.proto, f.inner_error }

local ex_refused = ProtoExpert.new("airpack.refused", "Bundle refused",
    expert.group.MALFORMED, expert.severity.ERROR)
local ex_inner = ProtoExpert.new("airpack.inner_refused", "Inner packet refused",
    expert.group.MALFORMED, expert.severity.WARN)
p.experts = { ex_refused, ex_inner }

local ip_dissector = Dissector.get("ip")
local ipv6_dissector = Dissector.get("ipv6")

-- Framing: each parser returns a list of { sep_off, sep_len, off, len, proto, spb }
-- (proto: simplemux label or nil) and an error reason or nil. Pure functions of
-- the bytes, the same order of checks as crates/core/src/wire/.

local function u8(tvb, o) return tvb(o, 1):uint() end

local function frame_native(tvb)
    local n = tvb:len()
    if n > MAX_BUNDLE then return {}, "overlong" end
    if n == 0 then return {}, "empty" end
    local b0 = u8(tvb, 0)
    if math.floor(b0 / 16) ~= 1 then return {}, "bad_version" end
    if b0 % 16 ~= 0 then return {}, "unsupported" end
    if n < 2 then return {}, "truncated" end
    if math.floor(u8(tvb, 1) / 16) ~= 0 then return {}, "unsupported" end
    if n == 2 then return {}, "empty" end
    local out, o = {}, 2
    while o < n do
        if #out > 0 and n - o < 21 then return out, "trailing_garbage" end
        if #out >= MAX_PACKETS then return out, "too_many_packets" end
        local a, len, plen = u8(tvb, o), 0, 0
        if a < 0x80 then
            len, plen = a, 1
        elseif a < 0xC0 then
            if n - o < 2 then return out, "truncated" end
            len, plen = (a - 0x80) * 256 + u8(tvb, o + 1), 2
            if len < 128 then return out, "overlong" end
        elseif a == 0xC0 then
            if n - o < 3 then return out, "truncated" end
            len, plen = tvb(o + 1, 2):uint(), 3
            if len < 16384 then return out, "overlong" end
        else
            return out, "unsupported"
        end
        if len == 0 then return out, "zero_length" end
        if o + plen + len > n then return out, "truncated" end
        out[#out + 1] = { sep_off = o, sep_len = plen, off = o + plen, len = len }
        o = o + plen + len
    end
    return out, nil
end

local function frame_kau(tvb)
    local n = tvb:len()
    if n > MAX_BUNDLE then return {}, "overlong" end
    if n == 0 then return {}, "empty" end
    local out, o = {}, 0
    while o < n do
        local left = n - o
        if #out > 0 and left < 20 then return out, "trailing_garbage" end
        if #out >= MAX_PACKETS then return out, "too_many_packets" end
        local v = math.floor(u8(tvb, o) / 16)
        if v == 6 then return out, "unsupported" end
        if v ~= 4 then return out, "bad_version" end
        if left < 20 then return out, "truncated" end
        local len = tvb(o + 2, 2):uint()
        if len < 20 then return out, "zero_length" end
        if len > left then return out, "truncated" end
        out[#out + 1] = { sep_off = o, sep_len = 0, off = o, len = len }
        o = o + len
    end
    return out, nil
end

local function frame_simplemux(tvb)
    local n = tvb:len()
    if n > MAX_BUNDLE then return {}, "overlong" end
    if n == 0 then return {}, "empty" end
    local out, o, spb = {}, 0, false
    while o < n do
        local first = #out == 0
        local min_sep = spb and 1 or 2
        if not first and n - o < min_sep + 20 then return out, "trailing_garbage" end
        if #out >= MAX_PACKETS then return out, "too_many_packets" end
        local b = u8(tvb, o)
        local s, len, k, more
        if first then
            spb = b >= 0x80
            more = (b % 0x80) >= 0x40
            len = b % 0x40
        else
            more = b >= 0x80
            len = b % 0x80
        end
        s, k = o + 1, 1
        while more do
            if k == 3 then return out, "overlong" end
            if s >= n then return out, "truncated" end
            local c = u8(tvb, s)
            more = c >= 0x80
            len = len * 128 + c % 0x80
            s, k = s + 1, k + 1
        end
        -- Shortest form: one byte fewer would not have held the value.
        local small = first and 64 or 128
        if k > 1 and len < small * 128 ^ (k - 2) then return out, "overlong" end
        if len > MAX_BUNDLE then return out, "overlong" end
        local proto = nil
        if first or not spb then
            if s >= n then return out, "truncated" end
            proto = u8(tvb, s)
            s = s + 1
        else
            proto = out[1].proto
        end
        if len == 0 then return out, "zero_length" end
        if s + len > n then return out, "truncated" end
        out[#out + 1] = { sep_off = o, sep_len = s - o, off = s, len = len, proto = proto, spb = spb }
        o = s + len
    end
    return out, nil
end

local framers = { [ENC.native] = frame_native, [ENC.kau] = frame_kau,
    [ENC.simplemux] = frame_simplemux }

-- The checks of ip::inspect_inner that a dissector can repeat cheaply: version,
-- length consistent with the framing, IPv4 header checksum, nesting.
local function ipv4_checksum_ok(t, ihl)
    local s = 0
    for i = 0, ihl - 2, 2 do s = s + t(i, 2):uint() end
    while s > 0xFFFF do s = (s % 0x10000) + math.floor(s / 0x10000) end
    return s == 0xFFFF
end

local function inner_check(t, label)
    local n = t:len()
    local v = math.floor(t(0, 1):uint() / 16)
    if label ~= nil and label ~= 4 and label ~= 41 then return "unsupported", v end
    if v == 4 then
        if n < 20 then return "zero_length", v end
        local ihl = (t(0, 1):uint() % 16) * 4
        if ihl < 20 or ihl > n or t(2, 2):uint() ~= n then return "bad_inner_header", v end
        if not ipv4_checksum_ok(t, ihl) then return "bad_ipv4_checksum", v end
        local pr = t(9, 1):uint()
        if pr == 253 or pr == 254 then return "nested", v end
    elseif v == 6 then
        if n < 40 then return "zero_length", v end
        if t(4, 2):uint() + 40 ~= n then return "bad_inner_header", v end
        local nh = t(6, 1):uint()
        if nh == 253 or nh == 254 then return "nested", v end
    else
        return "bad_version", v
    end
    return nil, v
end

-- Whether an inner packet is itself a bundle (IP protocol 253/254).
local function is_bundle(t, v)
    local n, at = t:len(), nil
    if v == 4 and n >= 20 then at = 9 elseif v == 6 and n >= 40 then at = 6 end
    if at == nil then return false end
    local pr = t(at, 1):uint()
    return pr == 253 or pr == 254
end

-- Formats registered by other files (see airpack_register_format).
local extra = {}

local function pick(tvb)
    local pref = p.prefs.encoding
    if pref ~= ENC.auto then
        local pkts, err = framers[pref](tvb)
        return pref, pkts, err
    end
    local order = { ENC.kau, ENC.simplemux }
    if tvb:len() > 0 and math.floor(u8(tvb, 0) / 16) == 1 then
        order = { ENC.native, ENC.kau, ENC.simplemux }
    end
    for _, e in ipairs(order) do
        local pkts, err = framers[e](tvb)
        if err == nil then return e, pkts, nil end
    end
    return ENC.auto, {}, "unknown encoding (set airpack.encoding)"
end

function p.dissector(tvb, pinfo, tree)
    for _, x in ipairs(extra) do
        if x.detect(tvb, pinfo) then return x.dissect(tvb, pinfo, tree) end
    end
    -- With a mesh key the bundle is everything before the trailer.
    local whole, trailer = tvb, nil
    if p.prefs.sealed and tvb:len() > TRAILER then
        trailer = tvb(tvb:len() - TRAILER, TRAILER)
        tvb = tvb(0, tvb:len() - TRAILER):tvb()
    end
    local enc, pkts, err = pick(tvb)
    if p.prefs.sealed and trailer == nil then
        err = "too short for the authentication trailer"
        pkts = {}
    end
    pinfo.cols.protocol = "airpack"
    local root = tree:add(p, whole(), "airpack bundle (" .. enc_names[enc] .. ")")
    if trailer then
        local a = root:add(trailer, "Authentication trailer")
        a:add(f.auth_node, trailer(0, 4))
        a:add(f.auth_seq, trailer(4, 8))
        a:add(f.auth_tag, trailer(12, 8))
    end
    root:add(f.encoding, enc_names[enc])
    root:add(f.count, #pkts)
    if enc == ENC.native and tvb:len() >= 2 then
        local h = root:add(tvb(0, 2), "Header")
        h:add(f.version, tvb(0, 1))
        h:add(f.mode, tvb(0, 1))
        h:add(f.crit, tvb(1, 1))
        h:add(f.info, tvb(1, 1))
    end
    if err then
        root:add_proto_expert_info(ex_refused, err)
        root:add(f.error, err)
    end
    local refused = 0
    for i, pk in ipairs(pkts) do
        local t = root:add(f.packet, tvb(pk.off, pk.len))
        t:set_text(string.format("Inner packet %d, %d bytes", i, pk.len))
        t:add(f.index, i)
        if pk.sep_len > 0 then
            local s = t:add(f.sep, tvb(pk.sep_off, pk.sep_len))
            s:add(f.sep_len, pk.sep_len)
            if enc == ENC.simplemux then
                if i == 1 then s:add(f.spb, tvb(pk.sep_off, 1), pk.spb) end
                if pk.proto ~= nil then s:add(f.proto, pk.proto) end
            end
        end
        t:add(f.len, pk.len)
        -- A refused bundle delivers nothing: its packets are shown, not decoded.
        if not err then
            local inner = tvb(pk.off, pk.len):tvb()
            local bad, v = inner_check(inner, enc == ENC.simplemux and pk.proto or nil)
            if bad then
                refused = refused + 1
                t:add(f.inner_error, bad)
                t:add_proto_expert_info(ex_inner, bad)
            end
            -- A nested bundle is not decoded again, whatever else is wrong with
            -- it (no recursion on hostile input).
            if is_bundle(inner, v) then
                -- shown as bytes only
            elseif v == 4 then
                ip_dissector:call(inner, pinfo, t)
            elseif v == 6 then
                ipv6_dissector:call(inner, pinfo, t)
            end
        end
    end
    local summary = string.format("airpack %s bundle, %d packets", enc_names[enc], #pkts)
    if err then summary = summary .. ", refused: " .. err end
    if refused > 0 then summary = summary .. string.format(", %d refused", refused) end
    pinfo.cols.info:prepend(summary .. " | ")
    return whole:len()
end

local ip_proto = DissectorTable.get("ip.proto")
ip_proto:add(253, p)
ip_proto:add(254, p)

local current_port = 0
local function register_udp_port()
    local udp = DissectorTable.get("udp.port")
    if current_port ~= 0 then udp:remove(current_port, p) end
    current_port = p.prefs.udp_port
    if current_port ~= 0 then udp:add(current_port, p) end
end
p.prefs_changed = register_udp_port
register_udp_port()

-- Extension point: another Lua file (loaded after this one) adds a format
-- carried in the same protocol numbers / UDP port:
--   airpack_register_format("hello", detect, dissect)
-- detect(tvb, pinfo) -> true when the payload is that format (it runs before
-- the bundle encodings); dissect(tvb, pinfo, tree) as a Wireshark dissector.
-- Reserved names: "hello" (neighbour hellos) and "downlink" (downlink
-- frames); their layouts are being designed and are not guessed here.
function airpack_register_format(name, detect, dissect)
    extra[#extra + 1] = { name = name, detect = detect, dissect = dissect }
end

-- The formats on their own ports (hellos, downlink frames and registration),
-- from the airpack/ directory next to this file.
local here = debug.getinfo(1, "S").source:match("^@(.*[/\\])") or ""
for _, name in ipairs({ "hello", "downlink", "dlreg" }) do
    dofile(here .. "airpack/" .. name .. ".lua")
end
