"""For CLI tests that damage RecordBatch v2 bytes on purpose: Kafka's
CRC-32C (Castagnoli) and the batch CRC fix-up, so that the damage is caught
by the rule under test and not by R4. Found through PYTHONPATH, which
lib/common.bash sets."""


def crc32c(data):
    crc = 0xFFFFFFFF
    for x in data:
        crc ^= x
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def fix_crc(batch):
    """Rewrites the CRC field (bytes 17-20) of the batch at the start of `batch`."""
    batch[17:21] = crc32c(batch[21:]).to_bytes(4, "big")
