"""`cxlbench plan`: a training or serving job's memory, part by part and per device."""
