import { fakeTarget } from '../helpers/kube-target.ts';
import { danmScenarios } from './danm-scenarios.ts';

danmScenarios('fake API server', () => fakeTarget());
