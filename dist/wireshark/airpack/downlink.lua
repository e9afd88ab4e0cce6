-- airpack/downlink.lua: downlink frames (seed 002; docs/wire-format.md,
-- "Downlink multiplexing"; crates/core/src/downlink/seed.rs, compact.rs).
--
-- UDP port 8888 (the seed's; preference `airpack_dl.udp_port`), sent to the
-- multicast group 225.0.0.10. Two layouts, not marked on the wire:
-- preference `airpack_dl.layout` (auto | seed | compact); auto takes a first
-- byte 0x1X as compact (version 1) and anything else as seed (a count of at
-- most 1024 starts with 0x00-0x04).
--   seed:    count, then per packet src, dst, RTP length, sport, dport and the
--            RTP bytes, handed to Wireshark's RTP dissector.
--   compact: version/flags, epoch, frame sequence, then every entry: stream
--            id, control byte (F, generation, R, M, IPv4 ID mode), length,
--            the static block of full entries, IPv4 ID, sequence LSB and the
--            payload. Only what is on the wire: a compressed entry's packet
--            needs the station's stream context (registration, earlier full
--            entries) and is not rebuilt here.
-- A frame the decoder would refuse is named with its reason
-- (`airpack_dl.error`: empty, truncated, trailing_bytes, overlong,
-- zero_length, bad_version, reserved, too_many_packets), in its order of
-- checks, and none of its packets goes to RTP.
--
-- Loaded by ../airpack.lua; standalone: -X lua_script:dist/wireshark/airpack/downlink.lua
-- _G: Wireshark runs each plugin file in its own environment; the guard is shared.
if _G.airpack_downlink_loaded then return end
_G.airpack_downlink_loaded = true

local p = Proto("airpack_dl", "airpack downlink frame")
local LAYOUT = { auto = 0, seed = 1, compact = 2 }
local layout_names = { [0] = "auto", [1] = "seed", [2] = "compact" }
p.prefs.layout = Pref.enum("Layout", LAYOUT.auto, "Frame layout (downlink format of the AP)",
    { { 1, "auto", LAYOUT.auto }, { 2, "seed", LAYOUT.seed }, { 3, "compact", LAYOUT.compact } },
    false)
p.prefs.udp_port = Pref.uint("UDP port", 8888, "UDP port of the downlink frames")

local MAX_FRAME = 65507
local MAX_PACKETS = 1024

local f = {
    layout = ProtoField.string("airpack_dl.layout", "Layout"),
    count = ProtoField.uint16("airpack_dl.count", "Packets"),
    error = ProtoField.string("airpack_dl.error", "Frame refused"),
    packet = ProtoField.bytes("airpack_dl.packet", "Packet"),
    index = ProtoField.uint16("airpack_dl.index", "Index"),
    -- seed
    src = ProtoField.ipv4("airpack_dl.seed.src", "Source"),
    dst = ProtoField.ipv4("airpack_dl.seed.dst", "Destination"),
    rtp_len = ProtoField.uint16("airpack_dl.seed.rtp_len", "RTP length"),
    sport = ProtoField.uint16("airpack_dl.seed.sport", "Source port"),
    dport = ProtoField.uint16("airpack_dl.seed.dport", "Destination port"),
    -- compact header
    version = ProtoField.uint8("airpack_dl.version", "Version", base.DEC, nil, 0xF0),
    hflags = ProtoField.uint8("airpack_dl.flags", "Flags", base.HEX, nil, 0x0F),
    epoch = ProtoField.uint8("airpack_dl.epoch", "Epoch"),
    fseq = ProtoField.uint16("airpack_dl.frame_seq", "Frame sequence number"),
    rlen = ProtoField.uint16("airpack_dl.repeat_len", "Repeat block length"),
    rcount = ProtoField.uint16("airpack_dl.repeat_count", "Repeated packets (previous frame's)"),
    rdepth = ProtoField.uint8("airpack_dl.repeat_depth", "Repeat blocks (frames seq-n .. seq-1)"),
    -- compact entry
    sid = ProtoField.uint16("airpack_dl.sid", "Stream id"),
    ctl = ProtoField.uint8("airpack_dl.ctl", "Control", base.HEX),
    full = ProtoField.bool("airpack_dl.ctl.full", "Full (static block follows)", 8, nil, 0x80),
    gen = ProtoField.uint8("airpack_dl.ctl.gen", "Context generation", base.DEC, nil, 0x70),
    rtp = ProtoField.bool("airpack_dl.ctl.rtp", "RTP header compressed", 8, nil, 0x08),
    marker = ProtoField.bool("airpack_dl.ctl.marker", "RTP marker", 8, nil, 0x04),
    idmode = ProtoField.uint8("airpack_dl.ctl.id_mode", "IPv4 ID", base.DEC,
        { [0] = "zero", [1] = "low 8 bits", [2] = "2 bytes", [3] = "reserved" }, 0x03),
    len = ProtoField.uint16("airpack_dl.len", "Payload length"),
    sflags = ProtoField.uint8("airpack_dl.sflags", "Static flags", base.HEX),
    v6 = ProtoField.bool("airpack_dl.sflags.ipv6", "IPv6", 8, nil, 0x80),
    df = ProtoField.bool("airpack_dl.sflags.df", "DF", 8, nil, 0x40),
    csum0 = ProtoField.bool("airpack_dl.sflags.csum0", "UDP checksum was 0", 8, nil, 0x20),
    tos = ProtoField.uint8("airpack_dl.tos", "TOS / traffic class", base.HEX),
    ttl = ProtoField.uint8("airpack_dl.ttl", "TTL / hop limit"),
    flow = ProtoField.uint24("airpack_dl.flow_label", "Flow label", base.HEX),
    csrc4 = ProtoField.ipv4("airpack_dl.src", "Source"),
    csrc6 = ProtoField.ipv6("airpack_dl.src6", "Source"),
    csport = ProtoField.uint16("airpack_dl.sport", "Source port"),
    pt = ProtoField.uint8("airpack_dl.rtp.pt", "RTP payload type"),
    ssrc = ProtoField.uint32("airpack_dl.rtp.ssrc", "RTP SSRC", base.HEX),
    stride = ProtoField.uint16("airpack_dl.rtp.stride", "Timestamp stride"),
    rseq = ProtoField.uint16("airpack_dl.rtp.seq", "RTP sequence number"),
    ts = ProtoField.uint32("airpack_dl.rtp.ts", "RTP timestamp"),
    ipid = ProtoField.uint16("airpack_dl.ip_id", "IPv4 ID"),
    ipid_lsb = ProtoField.uint8("airpack_dl.ip_id_lsb", "IPv4 ID, low 8 bits", base.HEX),
    seq_lsb = ProtoField.uint8("airpack_dl.rtp.seq_lsb", "RTP sequence, low 8 bits"),
    payload = ProtoField.bytes("airpack_dl.payload", "Payload"),
}
local fl = {}
for _, v in pairs(f) do fl[#fl + 1] = v end
p.fields = fl

local ex_refused = ProtoExpert.new("airpack_dl.refused", "Frame refused",
    expert.group.MALFORMED, expert.severity.ERROR)
local ex_not_rtp = ProtoExpert.new("airpack_dl.not_rtp", "Payload is not a whole RTP packet",
    expert.group.MALFORMED, expert.severity.NOTE)
p.experts = { ex_refused, ex_not_rtp }

local rtp_dissector = Dissector.get("rtp")

-- A refusal travels as a table through error(); anything else is a bug and
-- is raised again.
local function fail(reason) error({ reason = reason }, 0) end

-- Cursor over tvb from offset o; every read checked (truncated).
local function cursor(tvb, o) return { tvb = tvb, o = o, n = tvb:len() } end
local function take(c, k)
    if c.n - c.o < k then fail("truncated") end
    local r = k > 0 and c.tvb(c.o, k) or nil
    c.o = c.o + k
    return r
end

local function has(b, bit) return math.floor(b / bit) % 2 == 1 end

-- seed: checks of seed::decode; the packets it framed, for RTP.
local function seed(tvb, root, rtps)
    local n = tvb:len()
    if n > MAX_FRAME then fail("overlong") end
    if n == 0 then fail("empty") end
    if n < 2 then fail("truncated") end
    root:add(f.count, tvb(0, 2))
    local count = tvb(0, 2):uint()
    if count > MAX_PACKETS then fail("too_many_packets") end
    local c = cursor(tvb, 2)
    for i = 1, count do
        local h = take(c, 14)
        local len = h(8, 2):uint()
        if len == 0 then fail("zero_length") end
        local pl = take(c, len)
        local t = root:add(f.packet, tvb(h:offset(), 14 + len))
        t:set_text(string.format("Packet %d: %s:%d -> %s:%d, %d bytes", i,
            tostring(h(0, 4):ipv4()), h(10, 2):uint(), tostring(h(4, 4):ipv4()),
            h(12, 2):uint(), len))
        t:add(f.index, i)
        t:add(f.src, h(0, 4))
        t:add(f.dst, h(4, 4))
        t:add(f.rtp_len, h(8, 2))
        t:add(f.sport, h(10, 2))
        t:add(f.dport, h(12, 2))
        rtps[#rtps + 1] = { tree = t, range = pl }
    end
    if c.o < n then fail("trailing_bytes") end
    return count
end

-- The static block of a full entry (compact::read_static).
local function static_block(c, e, rtp)
    local sf_r = take(c, 1)
    local sf = sf_r:uint()
    local v6 = has(sf, 0x80)
    local s = e:add(f.sflags, sf_r)
    s:add(f.v6, sf_r)
    s:add(f.df, sf_r)
    s:add(f.csum0, sf_r)
    if sf % 32 ~= 0 or (v6 and (has(sf, 0x40) or has(sf, 0x20))) then fail("reserved") end
    e:add(f.tos, take(c, 1))
    e:add(f.ttl, take(c, 1))
    if v6 then
        local fr = take(c, 3)
        if fr(0, 1):uint() >= 16 then fail("reserved") end
        e:add(f.flow, fr)
        e:add(f.csrc6, take(c, 16))
    else
        e:add(f.csrc4, take(c, 4))
    end
    e:add(f.csport, take(c, 2))
    if rtp then
        local pt = take(c, 1)
        e:add(f.pt, pt)
        if pt:uint() >= 128 then fail("reserved") end
        e:add(f.ssrc, take(c, 4))
        e:add(f.stride, take(c, 2))
        e:add(f.rseq, take(c, 2))
        e:add(f.ts, take(c, 4))
    end
end

-- One entry (compact::split), shown as it is read.
local function entry(tvb, c, root, i)
    local start = c.o
    local e = root:add(f.packet, tvb(start, 1))
    e:add(f.index, i)
    local s0 = take(c, 1)
    local sid
    if s0:uint() < 128 then
        sid = s0:uint()
        e:add(f.sid, s0)
    else
        local s = take(c, 1)
        sid = (s0:uint() - 128) * 256 + s:uint()
        e:add(f.sid, tvb(start, 2), sid)
        if sid < 128 then fail("overlong") end
    end
    local ctl_r = take(c, 1)
    local ctl = ctl_r:uint()
    local ct = e:add(f.ctl, ctl_r)
    ct:add(f.full, ctl_r)
    ct:add(f.gen, ctl_r)
    ct:add(f.rtp, ctl_r)
    ct:add(f.marker, ctl_r)
    ct:add(f.idmode, ctl_r)
    local full, rtp, marker, ii = has(ctl, 0x80), has(ctl, 0x08), has(ctl, 0x04), ctl % 4
    if ii == 3 or (full and ii == 1) or (marker and not rtp) then fail("reserved") end
    local l0 = take(c, 1)
    local len
    if l0:uint() < 128 then
        len = l0:uint()
        e:add(f.len, l0)
    elseif l0:uint() < 192 then
        local l1 = take(c, 1)
        len = (l0:uint() - 128) * 256 + l1:uint()
        e:add(f.len, tvb(l0:offset(), 2), len)
        if len < 128 then fail("overlong") end
    else
        fail("reserved")
    end
    if full then static_block(c, e, rtp) end
    if ii == 1 then
        e:add(f.ipid_lsb, take(c, 1))
    elseif ii == 2 then
        e:add(f.ipid, take(c, 2))
    end
    if rtp and not full then e:add(f.seq_lsb, take(c, 1)) end
    local pl = take(c, len)
    if pl then e:add(f.payload, pl) end
    e:set_len(c.o - start)
    e:set_text(string.format("Entry %d: stream %d, %s%s, gen %d, %d payload bytes", i, sid,
        full and "full" or "compressed", rtp and ", RTP" or "",
        math.floor(ctl / 16) % 8, len))
end

local function compact(tvb, root)
    local n = tvb:len()
    if n > MAX_FRAME then fail("overlong") end
    if n == 0 then fail("empty") end
    local b0 = tvb(0, 1)
    root:add(f.version, b0)
    root:add(f.hflags, b0)
    if math.floor(b0:uint() / 16) ~= 1 then fail("bad_version") end
    -- Flag bit 0: a repeat block (ap.redundancy); bit 1 (only with bit 0):
    -- a count of 2-4 blocks follows (redundancy depth); bits 2-3 reserved.
    local flags = b0:uint() % 16
    if flags == 2 or flags > 3 then fail("reserved") end
    if n < 4 then fail("truncated") end
    root:add(f.epoch, tvb(1, 1))
    root:add(f.fseq, tvb(2, 2))
    local start, depth = 4, 0
    if flags == 3 then
        if n < 5 then fail("truncated") end
        depth = tvb(4, 1):uint()
        if depth < 2 or depth > 4 then fail("reserved") end
        root:add(f.rdepth, tvb(4, 1))
        start = 5
    elseif flags == 1 then
        depth = 1
    end
    local blocks = {}
    for j = 1, depth do
        if n < start + 2 then fail("truncated") end
        local rlen = tvb(start, 2):uint()
        if rlen == 0 then fail("empty") end
        if n < start + 2 + rlen then fail("truncated") end
        blocks[j] = { at = start, len = rlen }
        start = start + 2 + rlen
    end
    if n == start then fail("empty") end
    -- The frame's own entries are checked first, then the repeat blocks'
    -- (the core's order, so both name the same reason).
    local c, count = cursor(tvb, start), 0
    while c.o < n do
        if count == MAX_PACKETS then fail("too_many_packets") end
        count = count + 1
        entry(tvb, c, root, count)
    end
    local repeated = 0
    for j = 1, depth do
        local b = blocks[j]
        local rt = root:add(tvb(b.at, 2 + b.len), string.format(
            "Repeat block (frame seq-%d's entries)", depth - j + 1))
        rt:add(f.rlen, tvb(b.at, 2))
        local sub = tvb(b.at + 2, b.len):tvb()
        local rc, here = cursor(sub, 0), 0
        while rc.o < b.len do
            if here == MAX_PACKETS then fail("too_many_packets") end
            repeated = repeated + 1
            here = here + 1
            entry(sub, rc, rt, here)
        end
        rt:add(f.rcount, here)
    end
    if count + repeated > MAX_PACKETS then fail("too_many_packets") end
    return count
end

function p.dissector(tvb, pinfo, tree)
    local lay = p.prefs.layout
    if lay == LAYOUT.auto then
        lay = (tvb:len() > 0 and math.floor(tvb(0, 1):uint() / 16) == 1)
            and LAYOUT.compact or LAYOUT.seed
    end
    local name = layout_names[lay]
    pinfo.cols.protocol = "airpack dl"
    local root = tree:add(p, tvb(), "airpack downlink frame (" .. name .. ")")
    root:add(f.layout, name)
    local rtps = {}
    local ok, res = pcall(function()
        if lay == LAYOUT.seed then return seed(tvb, root, rtps) end
        return compact(tvb, root)
    end)
    local err
    if not ok then
        if type(res) ~= "table" then error(res, 0) end
        err = res.reason
        root:add(f.error, err)
        root:add_proto_expert_info(ex_refused, err)
    elseif lay == LAYOUT.compact then
        root:add(f.count, res)
    end
    -- A refused frame delivers nothing: its RTP is not decoded.
    if not err then
        for _, r in ipairs(rtps) do
            -- The payload need not be RTP (the seed's "RTP length" is the UDP
            -- payload's): a payload RTP cannot read is shown, not an error.
            local ok_rtp = pcall(function() rtp_dissector:call(r.range:tvb(), pinfo, r.tree) end)
            if not ok_rtp then r.tree:add_proto_expert_info(ex_not_rtp) end
        end
    end
    local info = "airpack downlink " .. name .. " frame"
    if ok then info = info .. string.format(", %d packets", res) end
    if err then info = info .. ", refused: " .. err end
    pinfo.cols.info:prepend(info .. " | ")
    return tvb:len()
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
