/* What both hosts of this folder share: OpenCL error checks, reading a file,
 * and picking the device a kernel was tuned for (saying what is wrong when
 * the ICD loader finds no runtime). Included by host.c and model_host.c. */
#ifndef LAYTUNE_HOST_COMMON_H
#define LAYTUNE_HOST_COMMON_H
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(cl_int status, const char *what) {
    if (status != CL_SUCCESS) {
        fprintf(stderr, "%s failed: OpenCL error %d\n", what, (int)status);
        exit(2);
    }
}

static void *read_file(const char *folder, const char *name, size_t *size) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", folder, name);
    FILE *file = fopen(path, "rb");
    if (file == NULL) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(2);
    }
    fseek(file, 0, SEEK_END);
    long length = ftell(file);
    fseek(file, 0, SEEK_SET);
    char *data = malloc((size_t)length + 1);
    if (data == NULL || fread(data, 1, (size_t)length, file) != (size_t)length) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(2);
    }
    data[length] = '\0';
    fclose(file);
    *size = (size_t)length;
    return data;
}

/* What an ICD loader returns when it finds no OpenCL runtime (cl_khr_icd). */
#ifndef CL_PLATFORM_NOT_FOUND_KHR
#define CL_PLATFORM_NOT_FOUND_KHR -1001
#endif

/* The ICD loader found no runtime: say where it looked and how to point it
 * at the runtimes pip installed for laytune, which it cannot find alone. */
static void no_platform(cl_int status) {
    const char *vendors = getenv("OCL_ICD_VENDORS");
    int set = vendors != NULL && vendors[0] != '\0';
    fprintf(stderr, "no OpenCL platform found (clGetPlatformIDs: OpenCL error %d%s): ", (int)status,
            status == CL_PLATFORM_NOT_FOUND_KHR ? ", CL_PLATFORM_NOT_FOUND_KHR" : "");
    if (set)
        fprintf(stderr, "the ICD loader found no runtime it can load in OCL_ICD_VENDORS=%s\n",
                vendors);
    else
        fprintf(stderr, "OCL_ICD_VENDORS is not set, and the ICD loader found no runtime in "
                        "/etc/OpenCL/vendors, where the runtimes pip installed are not listed\n");
    fprintf(stderr,
            "to run on the runtime laytune tuned on, point OCL_ICD_VENDORS at the vendors folder "
            "laytune writes (with the Python environment laytune is installed in), then run this "
            "program again:\n"
            "  %sexport OCL_ICD_VENDORS=\"$(python -c 'import os; from laytune.runners import "
            "register_opencl_runtimes as r; r(); print(os.environ.get(\"OCL_ICD_VENDORS\", \"\"))')\"\n"
            "(examples/opencl_host/README.md)\n",
            set ? "unset OCL_ICD_VENDORS; " : "");
    exit(2);
}

/* The device laytune tuned for ("<device> (<platform>)"), else the first one. */
static cl_device_id pick_device(const char *wanted) {
    cl_platform_id platforms[16];
    cl_uint n_platforms = 0;
    cl_int status = clGetPlatformIDs(16, platforms, &n_platforms);
    if (status == CL_PLATFORM_NOT_FOUND_KHR || (status == CL_SUCCESS && n_platforms == 0))
        no_platform(status);
    check(status, "clGetPlatformIDs");
    cl_device_id first = NULL;
    for (cl_uint p = 0; p < n_platforms; p++) {
        cl_device_id devices[16];
        cl_uint n_devices = 0;
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 16, devices, &n_devices) != CL_SUCCESS)
            continue;
        char platform[256] = "", device[256] = "", label[600];
        clGetPlatformInfo(platforms[p], CL_PLATFORM_NAME, sizeof platform, platform, NULL);
        for (cl_uint d = 0; d < n_devices; d++) {
            clGetDeviceInfo(devices[d], CL_DEVICE_NAME, sizeof device, device, NULL);
            snprintf(label, sizeof label, "%s (%s)", device, platform);
            if (first == NULL) first = devices[d];
            if (strcmp(label, wanted) == 0) return devices[d];
        }
    }
    if (first == NULL) {
        fprintf(stderr, "no OpenCL device (is OCL_ICD_VENDORS set? see the README)\n");
        exit(2);
    }
    fprintf(stderr, "note: %s not found; running on the first device\n", wanted);
    return first;
}

/* A file that must hold exactly ``bytes`` bytes; exit 2 when it holds another size. */
static void *read_exactly(const char *folder, const char *name, size_t bytes) {
    size_t size;
    void *data = read_file(folder, name, &size);
    if (size != bytes) {
        fprintf(stderr, "%s holds %zu bytes, expected %zu\n", name, size, bytes);
        exit(2);
    }
    return data;
}

/* The device laytune tuned for (pick_device), a context on it and a queue. */
static cl_command_queue open_queue(const char *wanted, cl_device_id *device, cl_context *context) {
    cl_int status;
    *device = pick_device(wanted);
    *context = clCreateContext(NULL, 1, device, NULL, NULL, &status);
    check(status, "clCreateContext");
    cl_command_queue queue = clCreateCommandQueue(*context, *device, 0, &status);
    check(status, "clCreateCommandQueue");
    return queue;
}

/* An RGBA float image of width x height texels (laytune's image2d buffers). */
static cl_mem create_image(cl_context context, size_t width, size_t height, cl_int *status) {
    cl_image_format rgba = {CL_RGBA, CL_FLOAT};
    cl_image_desc desc;
    memset(&desc, 0, sizeof desc);
    desc.image_type = CL_MEM_OBJECT_IMAGE2D;
    desc.image_width = width;
    desc.image_height = height;
    return clCreateImage(context, CL_MEM_READ_WRITE, &rgba, &desc, NULL, status);
}

/* Build one program for the device; print the build log and exit 2 when it fails. */
static cl_program build_program(cl_context context, cl_device_id device, const char *folder,
                                const char *file, const char *options) {
    cl_int status;
    size_t size;
    const char *source = read_file(folder, file, &size);
    cl_program program = clCreateProgramWithSource(context, 1, &source, &size, &status);
    check(status, "clCreateProgramWithSource");
    if (clBuildProgram(program, 1, &device, options, NULL, NULL) != CL_SUCCESS) {
        char log[16384] = "";
        clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
        fprintf(stderr, "building %s failed:\n%s\n", file, log);
        exit(2);
    }
    free((void *)source);
    return program;
}

/* Compare n float32 values with a reference the way laytune does:
 * |out - ref| <= atol * max(1, max |ref|) + rtol * |ref|; print one line; 1 if any differs. */
static int compare(const char *name, const float *out, const float *want, size_t n, double rtol,
                   double atol) {
    double scale = 1.0, worst = 0.0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) {
        double error = fabs((double)out[i] - want[i]);
        worst = isnan(error) ? INFINITY : fmax(worst, error);
        if (!(error <= atol * scale + rtol * fabs(want[i]))) wrong++;
    }
    printf("%s: %zu elements, max abs error %.3g, %s\n", name, n, worst,
           wrong ? "DIFFERS" : "matches the reference");
    return wrong != 0;
}

/* Read ``n`` float32 values of ``memory`` back and compare them with the
 * reference file (see compare); 1 if one differs. */
static int check_output(cl_command_queue queue, cl_mem memory, const char *name, const char *dtype,
                        size_t n, const char *folder, const char *reference_file, double rtol,
                        double atol) {
    if (strcmp(dtype, "float32") != 0) {
        fprintf(stderr, "%s: this example compares float32 outputs only, not %s\n", name, dtype);
        exit(2);
    }
    float *want = read_exactly(folder, reference_file, n * sizeof(float));
    float *out = malloc(n * sizeof(float));
    if (out == NULL) {
        fprintf(stderr, "%s: out of memory\n", name);
        exit(2);
    }
    check(clEnqueueReadBuffer(queue, memory, CL_TRUE, 0, n * sizeof(float), out, 0, NULL, NULL),
          "clEnqueueReadBuffer");
    int failed = compare(name, out, want, n, rtol, atol);
    free(out);
    free(want);
    return failed;
}
#endif
