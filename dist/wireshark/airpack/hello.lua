-- airpack/hello.lua: neighbour hellos (docs/wire-format.md, "Hello: neighbour
-- discovery between daemons (version 1)"; crates/core/src/neighbor/hello.rs).
--
-- UDP port 4151 (discovery.port; preference `airpack_hello.udp_port`), sent to
-- 224.0.0.151 / ff02::151. Shows the header, every neighbour entry and the
-- authentication trailer, and names a refused hello with the decoder's error
-- reason (`airpack_hello.error`: truncated, bad_version, unsupported,
-- bad_field, trailing_garbage), checked in the decoder's order. The tag is
-- shown, not verified (the dissector has no key).
--
-- Loaded by ../airpack.lua; standalone use: -X lua_script:dist/wireshark/airpack/hello.lua
-- _G: Wireshark runs each plugin file in its own environment; the guard is shared.
if _G.airpack_hello_loaded then return end
_G.airpack_hello_loaded = true

local p = Proto("airpack_hello", "airpack neighbour hello")
p.prefs.udp_port = Pref.uint("UDP port", 4151, "discovery.port of the daemons")

local HEADER = 22
local f = {
    version = ProtoField.uint8("airpack_hello.version", "Version"),
    flags = ProtoField.uint8("airpack_hello.flags", "Flags", base.HEX),
    auth = ProtoField.bool("airpack_hello.flags.auth", "Authentication trailer", 8, nil, 0x01),
    crit = ProtoField.uint8("airpack_hello.flags.must_understand", "Must-understand flags", base.HEX, nil, 0x0E),
    info = ProtoField.uint8("airpack_hello.flags.may_ignore", "May-ignore flags", base.HEX, nil, 0xF0),
    interval = ProtoField.uint16("airpack_hello.interval", "Interval (ms)"),
    sender = ProtoField.uint64("airpack_hello.sender", "Sender id", base.HEX),
    seq = ProtoField.uint64("airpack_hello.seq", "Sequence number"),
    encs = ProtoField.uint8("airpack_hello.encodings", "Encodings accepted", base.HEX),
    enc_native = ProtoField.bool("airpack_hello.encodings.native", "native", 8, nil, 0x01),
    enc_kau = ProtoField.bool("airpack_hello.encodings.kau", "kau", 8, nil, 0x02),
    enc_smux = ProtoField.bool("airpack_hello.encodings.simplemux", "simplemux", 8, nil, 0x04),
    count = ProtoField.uint8("airpack_hello.count", "Neighbour entries"),
    entry = ProtoField.bytes("airpack_hello.entry", "Neighbour entry"),
    nid = ProtoField.uint64("airpack_hello.neighbor", "Neighbour id", base.HEX),
    kind = ProtoField.uint8("airpack_hello.kind", "Kind", base.HEX),
    family = ProtoField.uint8("airpack_hello.family", "Address family", base.DEC,
        { [4] = "IPv4", [6] = "IPv6" }, 0x0F),
    radio = ProtoField.bool("airpack_hello.kind.radio", "Signal and noise follow", 8, nil, 0x80),
    ratio = ProtoField.uint8("airpack_hello.rx_ratio", "Receive ratio (/255)"),
    max_bundle = ProtoField.uint16("airpack_hello.max_bundle", "Max bundle (bytes, 0 = none)"),
    addr4 = ProtoField.ipv4("airpack_hello.addr", "Address"),
    addr6 = ProtoField.ipv6("airpack_hello.addr6", "Address"),
    signal = ProtoField.int8("airpack_hello.signal", "Signal (dBm)"),
    noise = ProtoField.int8("airpack_hello.noise", "Noise (dBm)"),
    key_id = ProtoField.uint8("airpack_hello.key_id", "Key id"),
    tag = ProtoField.bytes("airpack_hello.tag", "Tag (SipHash-2-4, not verified here)"),
    error = ProtoField.string("airpack_hello.error", "Hello refused"),
}
p.fields = { f.version, f.flags, f.auth, f.crit, f.info, f.interval, f.sender, f.seq,
    f.encs, f.enc_native, f.enc_kau, f.enc_smux, f.count, f.entry, f.nid, f.kind, f.family,
    f.radio, f.ratio, f.max_bundle, f.addr4, f.addr6, f.signal, f.noise, f.key_id, f.tag,
    f.error }

local ex_refused = ProtoExpert.new("airpack_hello.refused", "Hello refused",
    expert.group.MALFORMED, expert.severity.ERROR)
p.experts = { ex_refused }

-- Byte b has bit (a power of two) set.
local function has(b, bit) return math.floor(b / bit) % 2 == 1 end

function p.dissector(tvb, pinfo, tree)
    local n = tvb:len()
    pinfo.cols.protocol = "airpack hello"
    local root = tree:add(p, tvb(), "airpack neighbour hello")
    local err, shown = nil, 0
    local function refuse(reason)
        err = reason
        root:add(f.error, reason)
        root:add_proto_expert_info(ex_refused, reason)
    end
    if n == 0 then
        refuse("truncated")
    elseif tvb(0, 1):uint() ~= 1 then
        root:add(f.version, tvb(0, 1))
        refuse("bad_version")
    elseif n < HEADER then
        refuse("truncated")
    end
    if err then
        pinfo.cols.info = "airpack hello, refused: " .. err
        return n
    end
    local flags = tvb(1, 1):uint()
    root:add(f.version, tvb(0, 1))
    local ft = root:add(f.flags, tvb(1, 1))
    ft:add(f.auth, tvb(1, 1))
    ft:add(f.crit, tvb(1, 1))
    ft:add(f.info, tvb(1, 1))
    root:add(f.interval, tvb(2, 2))
    root:add(f.sender, tvb(4, 8))
    root:add(f.seq, tvb(12, 8))
    local et = root:add(f.encs, tvb(20, 1))
    et:add(f.enc_native, tvb(20, 1))
    et:add(f.enc_kau, tvb(20, 1))
    et:add(f.enc_smux, tvb(20, 1))
    root:add(f.count, tvb(21, 1))
    local count = tvb(21, 1):uint()
    if math.floor(flags / 2) % 8 ~= 0 then
        refuse("unsupported")
    elseif tvb(2, 2):uint() == 0 then
        refuse("bad_field")
    end
    local o = HEADER
    if not err then
        for i = 1, count do
            if n - o < 12 then refuse("truncated") break end
            local kind = tvb(o + 8, 1):uint()
            local fam = kind % 16
            local radio = has(kind, 0x80)
            if math.floor(kind / 16) % 8 ~= 0 or (fam ~= 4 and fam ~= 6) then
                refuse("unsupported")
                break
            end
            local alen = fam == 4 and 4 or 16
            local size = 12 + alen + (radio and 2 or 0)
            if n - o < size then refuse("truncated") break end
            local e = root:add(f.entry, tvb(o, size))
            e:add(f.nid, tvb(o, 8))
            local k = e:add(f.kind, tvb(o + 8, 1))
            k:add(f.family, tvb(o + 8, 1))
            k:add(f.radio, tvb(o + 8, 1))
            e:add(f.ratio, tvb(o + 9, 1))
            e:add(f.max_bundle, tvb(o + 10, 2))
            local addr
            if fam == 4 then
                e:add(f.addr4, tvb(o + 12, 4))
                addr = tostring(tvb(o + 12, 4):ipv4())
            else
                e:add(f.addr6, tvb(o + 12, 16))
                addr = tostring(tvb(o + 12, 16):ipv6())
            end
            if radio then
                e:add(f.signal, tvb(o + 12 + alen, 1))
                e:add(f.noise, tvb(o + 13 + alen, 1))
            end
            e:set_text(string.format("Neighbour %d: %s, %s, %d/255, max %d bytes", i,
                tostring(tvb(o, 8):uint64():tohex()), addr, tvb(o + 9, 1):uint(),
                tvb(o + 10, 2):uint()))
            shown = shown + 1
            o = o + size
        end
    end
    if not err and has(flags, 0x01) then
        if n - o < 9 then
            refuse("truncated")
        else
            root:add(f.key_id, tvb(o, 1))
            root:add(f.tag, tvb(o + 1, 8))
            o = o + 9
        end
    end
    if not err and o < n then refuse("trailing_garbage") end
    local info = string.format("airpack hello from %s seq %s, %d neighbours",
        tostring(tvb(4, 8):uint64():tohex()), tostring(tvb(12, 8):uint64()), shown)
    if err then info = info .. ", refused: " .. err end
    pinfo.cols.info = info
    return n
end

local current = 0
local function register_port()
    local udp = DissectorTable.get("udp.port")
    if current ~= 0 then udp:remove(current, p) end
    current = p.prefs.udp_port
    if current ~= 0 then udp:add(current, p) end
end
p.prefs_changed = register_port
register_port()
