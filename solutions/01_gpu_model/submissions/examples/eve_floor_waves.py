# Waves by floor division, sectors counted as every sector between the lowest and the highest address (the warp's
# span, as if it were contiguous), and bank conflicts counted per thread: waves, sectors and banks fail.
#%% occupancy from-solution
#%% waves from-solution
#%%- replace
    return -(-num_blocks // (num_sms * blocks_per_sm))
#%%- with
    return max(1, num_blocks // (num_sms * blocks_per_sm))
#%%- replace
    return (num_blocks - (waves(num_blocks, num_sms, blocks_per_sm) - 1) * slots) / slots
#%%- with
    return (num_blocks % slots or slots) / slots
#%% access_patterns
SECTOR_BYTES, BANKS, BANK_BYTES = 32, 32, 4


def sectors_touched(addresses, access_bytes: int = 4) -> int:
    """Distinct 32-byte sectors covered by [a, a + access_bytes) for every address a."""
    addresses = [int(a) for a in addresses]
    return (max(addresses) + access_bytes - 1) // SECTOR_BYTES - min(addresses) // SECTOR_BYTES + 1


def bank_conflict_ways(addresses) -> int:
    """Passes shared memory needs: the most distinct 4-byte words requested from any one bank."""
    addresses = [int(a) for a in addresses]
    counts = {}
    for a in addresses:
        counts[(a // 4) % 32] = counts.get((a // 4) % 32, 0) + 1
    return max(counts.values())
