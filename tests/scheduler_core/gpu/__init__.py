"""The cuda target's tests, across the floors (lowering to the kernel form, the CUDA printer,
nvcc, emulation, validity, measurement, search): kept in one folder because it is the device
tier, the folder a GPU machine's check runs whole. Tests that need a device are marked ``gpu``."""
