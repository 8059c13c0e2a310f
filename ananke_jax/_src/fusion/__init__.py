"""Domain fusion (seed 000): several constraint domains collapse into one sampling decision."""
