/* Run a kernel exported by `laytune export --reference` with the OpenCL C API
 * and check its outputs against laytune's numpy reference.
 *
 * Build it with the header that `laytune export` wrote for the kernel:
 *
 *     cc -std=c99 -O2 -include build/matmul_256x256x256_81d5c061.h \
 *         examples/opencl_host/host.c -lOpenCL -o host
 *     ./host build/
 *
 * The header describes the program: its source file, build options, every
 * buffer (logical and physical sizes, global buffer or RGBA float image,
 * role, reference data file) and every launch in order (pack, compute,
 * unpack: kernel name, arguments, global and local sizes). This program
 * allocates each buffer twice, dense in its logical shape and in its
 * physical layout (once where the header marks it aliased: its physical
 * storage is its logical array, and no launch packs or unpacks it), uploads
 * the inputs into the logical buffers, runs the launches, reads the outputs
 * back from the logical buffers and compares them with the reference: |out - ref| <= atol * max(1, max |ref|) +
 * rtol * |ref|, the check laytune itself applies. Exit status 0: every
 * output matches; 1: an output differs; 2: OpenCL or file trouble.
 */
#include "laytune_host.h"

#ifndef LAYTUNE_BUFFERS
#error "include the header laytune export wrote: cc -include build/<name>.h host.c -lOpenCL"
#endif

int main(int argc, char **argv) {
    const char *folder = argc > 1 ? argv[1] : ".";
    cl_int status;
    cl_device_id device;
    cl_context context;
    cl_command_queue queue = open_queue(LAYTUNE_DEVICE_NAME, &device, &context);

    cl_program program = build_program(context, device, folder, LAYTUNE_SOURCE_FILE,
                                       LAYTUNE_BUILD_OPTIONS);

    /* each buffer twice: dense in its logical shape, and in its physical layout;
     * an aliased buffer once, its logical array being its physical storage */
    cl_mem logical[LAYTUNE_BUFFER_COUNT], physical[LAYTUNE_BUFFER_COUNT];
    for (int b = 0; b < LAYTUNE_BUFFER_COUNT; b++) {
        const laytune_buffer *buffer = &LAYTUNE_BUFFERS[b];
        size_t bytes = buffer->logical_elements * buffer->item_size;
        logical[b] = clCreateBuffer(context, CL_MEM_READ_WRITE, bytes, NULL, &status);
        check(status, "clCreateBuffer (logical)");
        if (buffer->aliased) {
            physical[b] = logical[b];
        } else if (buffer->memory == LAYTUNE_IMAGE2D) {
            physical[b] = create_image(context, buffer->image_width, buffer->image_height, &status);
        } else {
            physical[b] = clCreateBuffer(context, CL_MEM_READ_WRITE,
                                         buffer->physical_elements * buffer->item_size, NULL, &status);
        }
        check(status, "creating a physical buffer");
        if (buffer->role != LAYTUNE_OUTPUT) {
            void *data = read_exactly(folder, buffer->data_file, bytes);
            check(clEnqueueWriteBuffer(queue, logical[b], CL_TRUE, 0, bytes, data, 0, NULL, NULL),
                  "clEnqueueWriteBuffer");
            free(data);
        }
    }

    for (int k = 0; k < LAYTUNE_LAUNCH_COUNT; k++) {
        const laytune_launch *launch = &LAYTUNE_LAUNCHES[k];
        cl_kernel kernel = clCreateKernel(program, launch->kernel, &status);
        check(status, launch->kernel);
        for (unsigned a = 0; a < launch->n_args; a++) {
            const laytune_arg *arg = &launch->args[a];
            cl_mem *memory = arg->view == LAYTUNE_LOGICAL ? &logical[arg->buffer] : &physical[arg->buffer];
            check(clSetKernelArg(kernel, a, sizeof(cl_mem), memory), "clSetKernelArg");
        }
        const size_t *local = launch->local_size[0] ? launch->local_size : NULL;
        check(clEnqueueNDRangeKernel(queue, kernel, launch->dims, NULL, launch->global_size, local,
                                     0, NULL, NULL),
              launch->kernel);
        clReleaseKernel(kernel);
    }
    check(clFinish(queue), "clFinish");

    int failed = 0;
    for (int b = 0; b < LAYTUNE_BUFFER_COUNT; b++) {
        const laytune_buffer *buffer = &LAYTUNE_BUFFERS[b];
        if (buffer->role == LAYTUNE_INPUT) continue;
        failed |= check_output(queue, logical[b], buffer->name, buffer->dtype,
                               buffer->logical_elements, folder, buffer->reference_file,
                               buffer->rtol, buffer->atol);
    }
    for (int b = 0; b < LAYTUNE_BUFFER_COUNT; b++) {
        clReleaseMemObject(logical[b]);
        if (physical[b] != logical[b]) clReleaseMemObject(physical[b]);
    }
    clReleaseProgram(program);
    clReleaseCommandQueue(queue);
    clReleaseContext(context);
    return failed;
}
